"""Handlers that return numbers JSON cannot carry, or create output files."""

import secrets


def total(ctx):
    return {"total": sum(ctx.params["values"]) * ctx.params.get("scale", 1)}


def nan_output(ctx):
    return {"value": float("nan")}


def inf_output(ctx):
    return {"nested": {"values": [1.0, float("-inf")]}}


def make_output(ctx):
    created = ctx.files.create(
        f"out-{secrets.token_hex(4)}.txt", secrets.token_hex(16), ctx.params.get("mime")
    )
    return {"id": created.id}
