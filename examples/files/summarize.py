"""Reads a managed file and creates one."""

import hashlib


def run(ctx):
    doc = ctx.params["document"]
    data = doc.read_bytes()
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    summary = f"{doc.name}: {lines} lines, {len(data)} bytes\n"
    for extra in ctx.params.get("attachments", []):
        summary += f"{extra.name}: {extra.size} bytes\n"
    out = ctx.files.create("summary.txt", summary, "text/plain")
    return {
        "name": doc.name,
        "mimeType": doc.mime_type,
        "lines": lines,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "attachments": len(ctx.params.get("attachments", [])),
        "summaryFile": {"id": out.id, "name": out.name, "size": out.size},
    }
