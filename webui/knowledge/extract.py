"""A file's text, for the knowledge base: `.txt` and `.md` as UTF-8, `.html` without its
markup, scripts and styles (read in one pass, not by the standard library's parser), `.pdf`
through pypdf (its text layer), `.docx` from its main document part. Anything else, or a file
that cannot be read as its kind, is refused naming the file; nothing here follows links, runs
code or expands entities.

The server reads HTML, PDF and .docx files only in a bounded child process
(`extract_child`, run by webui.knowledge.reader): a parser's cost on a crafted file is not
ours to bound from inside it."""

from __future__ import annotations

import html
import io
import json
import re
import time
import zipfile
from collections.abc import Iterator
from typing import Final

from webui.errors import KnowledgeRefused
from webui.knowledge.model import MAX_TITLE_CHARS

KINDS: Final = {".txt": "text", ".text": "text", ".md": "text", ".markdown": "text", ".html": "html",
                ".htm": "html", ".pdf": "pdf", ".docx": "docx"}  # fmt: skip
MAX_PDF_PAGES: Final = 2000
MAX_PDF_PAGE_CONTENT_BYTES: Final = 8 * 1024 * 1024  # one page's content streams, decoded
MAX_PDF_SECONDS = 30.0  # reading a PDF's pages stops past this
MAX_DOCX_XML_BYTES: Final = 64 * 1024 * 1024


IN_CHILD: Final = frozenset({"html", "pdf", "docx"})  # the kinds read in a bounded child


def kind_of(name: str) -> str:
    suffix = name[name.rfind(".") :].lower() if "." in name else ""
    found = KINDS.get(suffix)
    if found is None:
        known = ", ".join(sorted(KINDS))
        raise KnowledgeRefused(f"{name}: cannot add a file of this kind (known: {known})")
    return found


def extract(name: str, data: bytes, *, pdf_seconds: float = MAX_PDF_SECONDS) -> tuple[str, str | None]:
    """(text, title found in the file or None); a PDF's pages are read for `pdf_seconds` at most."""
    kind = kind_of(name)
    if kind == "text":
        return text_file(name, data)
    if kind == "html":
        return _html(_utf8(name, data))
    if kind == "pdf":
        return _pdf(name, data, pdf_seconds), None
    return _docx(name, data), None


def text_file(name: str, data: bytes) -> tuple[str, str | None]:
    """A `.txt` or `.md` file's text (and a Markdown file's first heading): decoding is
    linear in the file's size, so it needs no child process."""
    text = _utf8(name, data)
    heading = re.match(r"\s*# +([^\n]+)", text) if name.lower().endswith((".md", ".markdown")) else None
    return text, heading.group(1).strip() if heading else None


def extract_child(payload: bytes) -> bytes:
    """`extract` in a bounded child (webui.bounded_child). `payload`: a JSON line
    {"name", "maxTextBytes"}, then the file's bytes. Returns a JSON line, {"title"} or
    {"refused": message}, then the text as UTF-8 (at most maxTextBytes, else refused)."""
    head, _, data = payload.partition(b"\n")
    spec = json.loads(head)
    name, cap = spec["name"], spec["maxTextBytes"]
    try:
        text, title = extract(name, data)
        body = text.encode("utf-8", "replace")  # a PDF's text may hold lone surrogates
        if len(body) > cap:
            raise KnowledgeRefused(f"{name}: its text is larger than {cap} bytes")
    except KnowledgeRefused as exc:
        return json.dumps({"refused": exc.message[:1000]}).encode() + b"\n"
    # One character past the longest title: a longer one is refused as before.
    kept = None if title is None else title[: MAX_TITLE_CHARS + 1]
    return json.dumps({"title": kept}).encode() + b"\n" + body


def _utf8(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise KnowledgeRefused(f"{name}: not UTF-8 text (byte {exc.start})") from None


_BLOCKS: Final = frozenset(
    {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "figure",
     "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p",
     "pre", "section", "table", "td", "th", "tr", "ul"}
)  # fmt: skip
_HIDDEN: Final = frozenset({"script", "style", "template", "noscript", "head", "svg"})


_TAG_RE: Final = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*)[^<>]*>?")
_DECLARATION_RE: Final = re.compile(r"<[!?][^<>]*>?")
_RAW_END: Final = {name: re.compile(rf"</{name}[^<>]*>?", re.I) for name in ("script", "style")}


def _html(source: str) -> tuple[str, str | None]:
    """The text of an HTML document, in one pass: tags are read up to the next `>` or `<` (a
    tag never swallows what follows it), comments up to `-->`, a script's or style's content
    up to its end tag, so the time grows with the file's length alone (the standard library's
    parser rescans an unclosed tag from every `<`)."""
    parts: list[str] = []
    title: list[str] = []
    hidden = 0
    in_title = False
    n = len(source)
    pos = 0

    def data(piece: str) -> None:
        if not piece:
            return
        if in_title:
            title.append(html.unescape(piece))
        elif not hidden:
            parts.append(html.unescape(piece))

    while pos < n:
        lt = source.find("<", pos)
        if lt == -1:
            data(source[pos:])
            break
        data(source[pos:lt])
        if source.startswith("<!--", lt):
            end = source.find("-->", lt + 4)
            pos = n if end == -1 else end + 3
            continue
        tag = _TAG_RE.match(source, lt)
        if tag is None:
            declaration = _DECLARATION_RE.match(source, lt)
            if declaration is not None:
                pos = declaration.end()
            else:
                data("<")
                pos = lt + 1
            continue
        pos = tag.end()
        name = tag.group(2).lower()
        closing = tag.group(1) == "/"
        if not closing and name in _RAW_END:
            end_tag = _RAW_END[name].search(source, pos)
            pos = n if end_tag is None else end_tag.end()
        elif name == "title":
            in_title = not closing
        elif name in _HIDDEN:
            hidden = max(0, hidden + (-1 if closing else 1))
        elif name in _BLOCKS:
            parts.append("\n")
    text = re.sub(r"[ \t\r\f\v]+", " ", "".join(parts))
    text = re.sub(r" *\n[ \n]*\n *", "\n\n", text)
    text = re.sub(r" *\n *", "\n", text).strip()
    return text, " ".join("".join(title).split()) or None


def _pdf(name: str, data: bytes, seconds: float) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            raise KnowledgeRefused(f"{name}: the PDF is encrypted")
        if len(reader.pages) > MAX_PDF_PAGES:
            raise KnowledgeRefused(f"{name}: the PDF has more than {MAX_PDF_PAGES} pages")
        pages = []
        deadline = time.monotonic() + seconds
        for page in reader.pages:
            # pypdf parses content streams in Python (~0.3 MB/s): a few KB of zipped PDF whose
            # pages share one large stream would otherwise hold a worker for hours.
            contents = page.get_contents()
            if contents is not None and len(contents.get_data()) > MAX_PDF_PAGE_CONTENT_BYTES:
                raise KnowledgeRefused(f"{name}: a page of the PDF is too large to read")
            if time.monotonic() > deadline:
                raise KnowledgeRefused(f"{name}: the PDF takes too long to read")
            pages.append(page.extract_text() or "")
    except KnowledgeRefused:
        raise
    except (PyPdfError, ValueError, TypeError, KeyError, IndexError, AttributeError, OSError, RecursionError,
            AssertionError, ZeroDivisionError):  # fmt: skip
        raise KnowledgeRefused(f"{name}: not a readable PDF") from None
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        raise KnowledgeRefused(f"{name}: the PDF has no text to extract (a scan without a text layer?)")
    return text


# Linear in the part's size, whatever its bytes: a paragraph is found by `find`, never by a
# lazy scan to the end from each opening, and a run's tag never scans past the next `<` (a
# part of unclosed `<w:p ` or `<w:t ` would otherwise cost time quadratic in its size, and
# `re` holds the GIL while it matches).
_OPEN_RE: Final = re.compile(rb"<w:p(?:[ >]|/>)")
_RUN_RE: Final = re.compile(rb"<w:t(?: [^<>]*)?>([^<]*)</w:t>|<w:(tab|br|cr)\b[^<>]*/>")


def _paragraphs(xml: bytes) -> Iterator[bytes]:
    """What `<w:p[ >].*?</w:p>|<w:p/>` (dotall) finds, in one pass."""
    at = 0
    closed = True  # False once no `</w:p>` is left after `at`
    while (opening := _OPEN_RE.search(xml, at)) is not None:
        if opening.group().endswith(b"/>"):
            yield opening.group()
            at = opening.end()
            continue
        end = xml.find(b"</w:p>", opening.end()) if closed else -1
        if end == -1:
            closed = False
            at = opening.end()
            continue
        yield xml[opening.start() : end + 6]
        at = end + 6


def _docx(name: str, data: bytes) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = archive.getinfo("word/document.xml")
            if info.file_size > MAX_DOCX_XML_BYTES:
                raise KnowledgeRefused(f"{name}: the document is too large once unpacked")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 0x1:
                # what Word writes; anything else (encrypted, another method) is no .docx we read
                raise KnowledgeRefused(
                    f"{name}: the document is encrypted or packed in a way .docx files are not"
                )
            with archive.open(info) as fh:
                xml = fh.read(MAX_DOCX_XML_BYTES + 1)
    except KnowledgeRefused:
        raise
    except (zipfile.BadZipFile, KeyError, OSError, EOFError, ValueError):
        raise KnowledgeRefused(f"{name}: not a readable .docx file") from None
    if len(xml) > MAX_DOCX_XML_BYTES:
        raise KnowledgeRefused(f"{name}: the document is too large once unpacked")
    paragraphs = []
    for para in _paragraphs(xml):
        pieces = []
        for run in _RUN_RE.finditer(para):
            if run.group(2) is not None:
                pieces.append("\t" if run.group(2) == b"tab" else "\n")
            else:
                pieces.append(html.unescape(run.group(1).decode("utf-8", "replace")))
        paragraphs.append("".join(pieces))
    text = "\n".join(paragraphs).strip()
    if not text:
        raise KnowledgeRefused(f"{name}: the document has no text")
    return text
