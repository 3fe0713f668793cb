"""Tools of the conformance fixture that ask the MCP client itself: its model
(`ctx.sample`, sampling/createMessage) and its roots (`ctx.roots`, roots/list)."""


def test_sampling(ctx):
    try:
        result = ctx.sample(ctx.params["prompt"], max_tokens=100)
    except RuntimeError as exc:  # ClientRequestRefused: no sampling from this client
        ctx.fail("sampling_unavailable", str(exc))
    else:
        return f"LLM response: {result['content'].get('text', '')}"


def test_input_required_result_sampling(ctx):
    result = ctx.sample("What is the capital of France?", max_tokens=100, key="capital_question")
    return f"The model says: {result['content'].get('text', '')}"


def test_input_required_result_list_roots(ctx):
    roots = ctx.roots(key="client_roots")
    return "Roots: " + ", ".join(r["uri"] for r in roots)


def test_input_required_result_capabilities(ctx):
    """Asks a person and samples in one round, the form first: a client that declared only
    sampling is sent only the sampling request (the form waits for the browser)."""
    with ctx.together() as round:
        answer = round.ask(
            "Your name", {"type": "object", "properties": {"name": {"type": "string"}}}, key="user_name"
        )
        result = round.sample("Say hello", max_tokens=50, key="greeting")
    text = result.result()["content"].get("text", "")
    return f"{text} {(answer.result() or {}).get('name', '')}".strip()


def roots_or_refusal(ctx):
    try:
        return {"roots": ctx.roots()}
    except RuntimeError as exc:
        return {"refused": str(exc)}


def sample_or_refusal(ctx):
    try:
        return {"result": ctx.sample(ctx.params.get("prompt") or "hi", max_tokens=20)}
    except RuntimeError as exc:
        return {"refused": str(exc)}


NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
GREETING = [{"role": "user", "content": {"type": "text", "text": "Generate a greeting"}}]


def test_input_required_result_multiple_inputs(ctx):
    """Three kinds of requests in one round (`ctx.together()`)."""
    with ctx.together() as round:
        name = round.ask("What is your name?", NAME_SCHEMA, key="user_name")
        greeting = round.sample(messages=GREETING, max_tokens=50, key="greeting")
        roots = round.roots(key="client_roots")
    text = greeting.result()["content"].get("text", "")
    return f"{text} {name.result()['name']} ({len(roots.result())} roots)"


def together_or_refusal(ctx):
    """What each request of a round gave, or why it gave nothing."""
    with ctx.together() as round:
        asked = {
            "name": round.ask("What is your name?", NAME_SCHEMA, key="user_name"),
            "greeting": round.sample(messages=GREETING, max_tokens=50, key="greeting"),
            "roots": round.roots(key="client_roots"),
        }
    out = {}
    for what, one in asked.items():
        try:
            out[what] = one.result()
        except RuntimeError as exc:
            out[what] = {"refused": str(exc)}
    return out


def together_sampling_first(ctx):
    """`together_or_refusal`'s round in another order: the client's requests, then the form."""
    with ctx.together() as round:
        asked = {
            "greeting": round.sample(messages=GREETING, max_tokens=50, key="greeting"),
            "roots": round.roots(key="client_roots"),
            "name": round.ask("What is your name?", NAME_SCHEMA, key="user_name"),
        }
    out = {}
    for what, one in asked.items():
        try:
            out[what] = one.result()
        except RuntimeError as exc:
            out[what] = {"refused": str(exc)}
    return out


def sample_uncaught(ctx):
    """Asks the client's model and lets a refusal escape (no `requires`: the run finds out)."""
    return ctx.sample(ctx.params.get("prompt") or "hi", max_tokens=20)
