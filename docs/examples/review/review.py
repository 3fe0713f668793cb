def review(ctx):
    ctx.progress(0, 1, "waiting for the reviewer")
    approved = ctx.approve(f"merge {ctx.params['change']}", key="merge")
    return {"change": ctx.params["change"], "merged": approved}
