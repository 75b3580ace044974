"""tests/conftest.py's background thread (``EARLY_CHILDREN``): its temporary folders stay in the
folder the session started with while a test on the main thread points ``tempfile`` elsewhere
(``$TMPDIR`` set, ``tempfile.tempdir`` reset: the tests that look at what the code under test
leaves there found the background SGLang drive's folder in theirs once)."""

import os
import tempfile
import threading
from pathlib import Path


def _tests_conftest(config):
    """tests/conftest.py as pytest loaded it (one of its plugins)."""
    here = Path(__file__).resolve().parents[1] / "conftest.py"
    return next(m for m in config.pluginmanager.get_plugins()
                if getattr(m, "__file__", None) and Path(m.__file__).resolve() == here)


def test_the_background_threads_folders_stay_where_the_session_started(tmp_path, monkeypatch, request):
    tc = _tests_conftest(request.config)
    session = tmp_path / "session"
    test_dir = tmp_path / "test"
    session.mkdir()
    test_dir.mkdir()
    monkeypatch.setattr(tempfile, "gettempdir", tempfile.gettempdir)  # undone after the test
    monkeypatch.setattr(tempfile, "tempdir", str(session))
    tc._pin_early_tempdir()
    monkeypatch.setenv("TMPDIR", str(test_dir))  # what a test on the main thread does meanwhile
    monkeypatch.setattr(tempfile, "tempdir", None)
    made = {}

    def early():
        made["early"] = tempfile.mkdtemp(prefix="fp4moe-early-")

    for name in (tc._EARLY_THREAD, "another-thread"):
        t = threading.Thread(target=early, name=name)
        t.start()
        t.join()
        made[name] = made.pop("early")
    made["main"] = tempfile.mkdtemp(prefix="fp4moe-main-")
    assert os.path.dirname(made[tc._EARLY_THREAD]) == str(session), made
    assert os.path.dirname(made["another-thread"]) == str(test_dir), made
    assert os.path.dirname(made["main"]) == str(test_dir), made
