"""Business errors: ctx.fail ends the run with an errCode the caller can act on."""


def post_entry(ctx):
    if ctx.kv.get("locked", False):
        ctx.fail(7, "ledger is locked")
    balance = ctx.kv.get("balance", 0) + ctx.params["amount"]
    ctx.kv.set("balance", balance)
    history = ctx.values.get("history", [])
    history.append({"amount": ctx.params["amount"], "memo": ctx.params.get("memo")})
    ctx.values.set("history", history[-50:])
    return {"balance": balance, "entries": len(history)}


def close_period(ctx):
    ctx.kv.set("locked", True)
    return {"locked": True, "balance": ctx.kv.get("balance", 0)}
