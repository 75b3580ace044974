"""The scripted completions server the GSM8K gate is tested against (no lm-eval needed)."""

import json
import urllib.error
import urllib.request

import pytest

from fp4moe.completions.data import MINI_DATA_DIR
from fp4moe.completions.replay_server import ReplayServer, load_records, question_of, seeded_script, worked_correct, worked_unformatted, worked_wrong

RECORDS = load_records(MINI_DATA_DIR / "test.jsonl")[:3]
FEWSHOT = "Question: Tom has 3 apples and eats 1. How many are left?\nAnswer: 3 - 1 = 2\n#### 2\n\n"


def _post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.read()


def test_question_of_takes_the_last_question_not_a_fewshot_one():
    q = RECORDS[1]["question"]
    assert question_of(FEWSHOT + f"Question: {q}\nAnswer:") == q
    with pytest.raises(KeyError):
        question_of("no question here")


def test_response_kinds():
    ans = RECORDS[0]["answer"]  # ends "#### 18"
    assert worked_correct(ans).endswith("#### 18")
    assert worked_wrong(ans).endswith("#### 19") and worked_wrong(ans).count("####") == 1
    assert worked_unformatted(ans).endswith("The answer is 18.") and "####" not in worked_unformatted(ans)
    with pytest.raises(ValueError, match="kinds has 2 entries for 3 records"):
        seeded_script(RECORDS, ["correct", "wrong"])


def test_serves_script_with_stop_strings_and_models():
    script = seeded_script(RECORDS, ["correct", "wrong", "unformatted"])
    script[RECORDS[2]["question"]] += "\n\nQuestion: next"  # a stop string the server must cut at
    with ReplayServer(script, model_name="m") as srv:
        with urllib.request.urlopen(srv.base_url + "/v1/models", timeout=5) as r:
            assert json.load(r)["data"][0]["id"] == "m"
        prompts = [FEWSHOT + f"Question: {r['question']}\nAnswer:" for r in RECORDS]
        status, raw = _post(srv.base_url, {"prompt": prompts, "stop": ["Question:"], "model": "m"})
        texts = [c["text"] for c in json.loads(raw)["choices"]]
        assert status == 200 and srv.completion_requests == 1
        assert texts[0] == worked_correct(RECORDS[0]["answer"])
        assert texts[1] == worked_wrong(RECORDS[1]["answer"])
        assert texts[2] == worked_unformatted(RECORDS[2]["answer"]) + "\n\n"
        with pytest.raises(urllib.error.HTTPError) as e:  # unknown question: loud, not a guess
            _post(srv.base_url, {"prompt": "Question: what?\nAnswer:"})
        assert e.value.code == 404


@pytest.mark.parametrize("mode", ["garbage", "http500", "null_text", "no_choices"])
def test_failure_modes(mode):
    script = seeded_script(RECORDS, ["correct"] * 3)
    prompt = f"Question: {RECORDS[0]['question']}\nAnswer:"
    with ReplayServer(script, mode=mode) as srv:
        try:
            status, raw = _post(srv.base_url, {"prompt": prompt})
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
    if mode == "garbage":
        with pytest.raises(json.JSONDecodeError):
            json.loads(raw)
    elif mode == "http500":
        assert status == 500
    elif mode == "null_text":
        assert json.loads(raw)["choices"][0]["text"] is None
    else:
        assert "choices" not in json.loads(raw)


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="mode 'slow'"):
        ReplayServer({}, mode="slow")
