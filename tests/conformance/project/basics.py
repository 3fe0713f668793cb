"""Quick tools of the conformance fixture: plain results, errors, progress."""


def greet(ctx):
    return f"Hello, {ctx.params['name']}!"
