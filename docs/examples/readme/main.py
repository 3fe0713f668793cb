def greet(ctx):
    answer = ctx.ask("Formal?", [{"name": "formal", "type": "boolean", "required": True}])
    if answer is None:  # the person declined
        return {"greeting": None}
    return {"greeting": f"{'Good day' if answer['formal'] else 'Hi'}, {ctx.params['name']}!"}
