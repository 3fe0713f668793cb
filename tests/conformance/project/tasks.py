"""Tools of the conformance fixture that run as MCP tasks (the tasks extension)."""

import os
import threading
import time


def slow_compute(ctx):
    seconds = float(ctx.params.get("seconds", 0))
    label = ctx.params.get("label", "")
    if seconds > 0:
        ctx.progress(0, seconds, f"computing {label}")
        time.sleep(seconds)
    return f"{label}: computed in {seconds:g} s"


def failing_job(ctx):
    time.sleep(0.5)
    ctx.fail("job_failed", "The job failed, as it always does.")


def protocol_error_job(ctx):
    # The worker process dies: no outcome of the tool's own (the task ends `failed`).
    os._exit(3)


def confirm_delete(ctx):
    filename = ctx.params["filename"]
    answer = ctx.ask(f"Delete {filename}?", [{"name": "confirm", "type": "boolean", "required": True}])
    deleted = bool(answer and answer["confirm"])
    return f"{filename}: {'deleted' if deleted else 'kept'}"


def multi_input(ctx):
    """Two questions pending at once, each asked from its own thread."""
    answers = {}

    def ask(n):
        answers[n] = ctx.ask(
            f"Question {n}",
            [{"name": "name", "type": "string", "required": True}, {"name": "confirm", "type": "boolean"}],
        )

    threads = [threading.Thread(target=ask, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ", ".join(str((answers[n] or {}).get("name")) for n in (1, 2))


def test_tool_with_task(ctx):
    """An input round before the work (MRTR), then the work as a task."""
    answer = ctx.ask("What is your name?", [{"name": "name", "type": "string", "required": True}])
    name = answer["name"] if answer else "nobody"
    ctx.progress(0, 1, "working")
    time.sleep(0.2)
    return f"Hello, {name}!"


def two_keyed_questions(ctx):
    """Two questions pending at once, named `first` and `second` by the handler (or both
    `same` when asked so: the round names the later one by its id)."""
    answers = {}
    keys = ("same", "same") if ctx.params.get("same") else ("first", "second")

    def ask(n):
        answers[n] = ctx.ask(
            f"Question {n}", [{"name": "name", "type": "string", "required": True}], key=keys[n]
        )

    threads = [threading.Thread(target=ask, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ", ".join(str((answers[n] or {}).get("name")) for n in (0, 1))


def bad_key(ctx):
    ctx.ask("Name?", [{"name": "name", "type": "string"}], key=ctx.params["key"])
    return "asked"


def same_key_twice(ctx):
    """Asks under the key `step` twice, one question after the other (a task must name the
    second by its id: a key names one request over the task's life)."""
    first = ctx.ask("Step 1", [{"name": "name", "type": "string", "required": True}], key="step")
    second = ctx.ask("Step 2", [{"name": "name", "type": "string", "required": True}], key="step")
    return f"{(first or {}).get('name')} then {(second or {}).get('name')}"


def ask_then_work(ctx):
    """An input round before the work (MRTR), then `seconds` of work as a task."""
    answer = ctx.ask("Who is it for?", [{"name": "name", "type": "string", "required": True}], key="who")
    seconds = float(ctx.params.get("seconds", 0))
    ctx.progress(0, seconds, "working")
    time.sleep(seconds)
    return f"done for {(answer or {}).get('name')}"
