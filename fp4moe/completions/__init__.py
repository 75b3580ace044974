"""OpenAI-compatible completions: the client, the endpoint probes, prompts and GSM8K data,
and two loopback servers (``replay_server`` for recorded answers, ``stream_server`` with
scripted timing and faults). Used by the accuracy and serve-bench gates; no verdicts here.
"""
