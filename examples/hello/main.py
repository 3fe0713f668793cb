"""A plain workflow: no interaction, just a result."""

WORDS = {"en": "Hello", "fr": "Bonjour"}


def greet(ctx):
    p = ctx.params
    text = f"{WORDS[p.get('language', 'en')]}, {p['name']}!"
    if p.get("shout"):
        text = text.upper()
    ctx.log(f"greeting {p['name']}")
    return {"greeting": " ".join([text] * int(p.get("times", 1)))}


def echo(ctx):
    return {"text": ctx.params["text"]}
