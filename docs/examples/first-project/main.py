def greet(ctx):
    answer = ctx.ask("How should I greet?", [{"name": "formal", "type": "boolean", "required": True}])
    if answer is None:  # the person declined the question
        return {"greeting": None}
    word = "Good day" if answer["formal"] else "Hi"
    return {"greeting": f"{word}, {ctx.params['name']}!"}


def count_words(ctx):
    document = ctx.params["document"]  # a managed file: name, size, mime_type, read_bytes()
    text = document.read_bytes().decode("utf-8", errors="replace")
    return {"file": document.name, "words": len(text.split())}
