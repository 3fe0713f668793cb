"""Conformance fixture tools for the utilities: a plain text result, a tool error, progress
and log lines (`ctx.log` becomes `notifications/message` on the call, webui.mcp.logs)."""

import time


def simple_text(ctx):
    return "This is a simple text response for testing."


def error_handling(ctx):
    ctx.fail("intentional_error", "This tool intentionally returns an error for testing")


def with_progress(ctx):
    for done in (0, 50, 100):
        ctx.progress(done, 100)
        if done < 100:
            time.sleep(0.05)
    return "Progress complete."


def with_logging(ctx):
    ctx.log("Tool execution started")
    time.sleep(0.05)
    ctx.log("Tool processing data")
    time.sleep(0.05)
    ctx.log("Tool execution completed")
    return "Logging complete."


def logging_tool(ctx):
    ctx.log("A log line no request asked for.")
    return "Logged."
