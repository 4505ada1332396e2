"""Documents and rows: the text as the lm-eval and gptq protocols see it. No torch.

* ``--documents FILE.jsonl``: one document per line, the string in ``--document-field`` (default ``text``); as
  an lm-eval task with ``doc_to_target: text`` and the default ``process_results``, words and bytes are counted on
  each document.
* ``--documents articles``: a WikiText raw file split into articles as the Hugging Face dataset
  ``EleutherAI/wikitext_document_level`` splits it (a line that reads ``= Title =`` once ``= = =`` / ``= =`` are
  closed up starts a new article; the lines are joined by "\\n"), each article then passed through lm-eval's
  ``wikitext_detokenizer``; as lm-eval's ``wikitext`` task does, words and bytes are counted on the article
  *before* detokenization.
* gptq rows: the Hugging Face ``wikitext`` builder yields one row per line of the raw file, the line with its
  "\\n" when it has non-blank content and "" otherwise; the GPTQ/AWQ scripts score ``"\\n\\n".join(rows)``.

Word counting is lm-eval's: ``len(re.split(r"\\s+", doc))`` (so "" counts 1 and leading or trailing whitespace
adds one empty word each).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import DataError, spell
from infoeval.input.text import Text, load_text

WIKITEXT_DATASETS = ("wikitext-2", "wikitext-2-valid")


def count_words(doc: str) -> int:
    """lm-eval's word count.

    >>> count_words("a b  c"), count_words(" a\\n"), count_words("")
    (3, 3, 1)
    """
    return len(re.split(r"\s+", doc))


def count_bytes(doc: str) -> int:
    return len(doc.encode("utf-8"))


@dataclass(frozen=True)
class Documents:
    """The strings scored (``texts``), and the words and bytes lm-eval divides by (of each original document)."""

    texts: tuple[str, ...]
    words: tuple[int, ...]
    nbytes: tuple[int, ...]
    rule: str


def wikitext_articles(raw: str) -> list[str]:
    """The articles of a WikiText raw file, as the ``wikitext_document_level`` dataset builder yields them."""
    pages, lines = [], []
    for line in raw.split("\n"):
        rline = line.replace("= = =", "===").replace("= =", "==").strip()
        if rline.startswith("= ") and rline.strip().endswith(" ="):
            page = "\n".join(lines)
            if page.strip():
                pages.append(page)
            lines = []
        lines.append(line)
    pages.append("\n".join(lines))
    return pages


def wikitext_detokenizer(string: str) -> str:
    """lm-eval's ``wikitext_detokenizer`` (lm_eval/tasks/wikitext/preprocess_wikitext.py), step for step."""
    string = string.replace("s '", "s'")
    string = re.sub(r"/' [0-9]/", r"/'[0-9]/", string)
    for a, b in (
        (" @-@ ", "-"),
        (" @,@ ", ","),
        (" @.@ ", "."),
        (" : ", ": "),
        (" ; ", "; "),
        (" . ", ". "),
        (" ! ", "! "),
        (" ? ", "? "),
        (" , ", ", "),
    ):
        string = string.replace(a, b)
    string = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", string)
    string = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", string)
    string = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", string)
    string = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', string)
    string = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", string)
    for a, b in (
        ("= = = =", "===="),
        ("= = =", "==="),
        ("= =", "=="),
        (" " + chr(176) + " ", chr(176)),
        (" \n", "\n"),
        ("\n ", "\n"),
        (" N ", " 1 "),
        (" 's", "'s"),
    ):
        string = string.replace(a, b)
    return string


def read_jsonl(path: Path, field: str) -> tuple[list[str], bytes]:
    """The ``field`` string of every line of a JSONL file (blank lines skipped), and the file's bytes."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"documents file '{path}' does not exist; {spell('documents')} takes a JSONL file or 'articles'"
        )
    raw = path.read_bytes()
    docs = []
    for i, line in enumerate(raw.decode("utf-8", errors="strict").split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"documents file '{path}' line {i} is not JSON ({e.msg}); one JSON object per line"
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            raise DataError(
                f"documents file '{path}' line {i} has no string field '{field}'; choose it with "
                f"{spell('document_field')}"
            )
        docs.append(record[field])
    if not docs:
        raise DataError(f"documents file '{path}' holds no document")
    return docs, raw


def load_documents(
    text_path: Path | None, dataset: str | None, data_dir: Path | None, documents: str | None, field: str = "text"
) -> tuple[Text, Documents]:
    """The text and its documents: one document (the whole text) without ``documents``; the text recorded is
    the scored strings concatenated, so that token byte counts index it."""
    if documents is None:
        text = load_text(text_path, dataset, data_dir)
        return text, Documents((text.text,), (count_words(text.text),), (text.n_bytes,), "one document: the whole text")
    if documents == "articles":
        raw = load_text(text_path, dataset, data_dir)
        pages = wikitext_articles(raw.text)
        targets = tuple(wikitext_detokenizer(p) for p in pages)
        rule = (
            f"{len(pages)} WikiText articles (wikitext_document_level's split) through lm-eval's wikitext_detokenizer; "
            f"words and bytes counted before detokenization"
        )
        text = Text("".join(targets), raw.source, raw.path, raw.sha256, f"articles: {rule}")
        return text, Documents(
            targets, tuple(count_words(p) for p in pages), tuple(count_bytes(p) for p in pages), rule
        )
    try:
        docs, raw_bytes = read_jsonl(Path(documents), field)
    except UnicodeDecodeError as e:
        raise DataError(f"documents file '{documents}' is not UTF-8 (bad byte at offset {e.start})") from None
    rule = f"{len(docs)} documents, field '{field}' of each line of a JSONL file"
    text = Text(
        "".join(docs),
        "jsonl",
        str(Path(documents).resolve()),
        hashlib.sha256(raw_bytes).hexdigest(),
        f"documents: {rule}, concatenated (each scored as its own stream)",
    )
    return text, Documents(tuple(docs), tuple(count_words(d) for d in docs), tuple(count_bytes(d) for d in docs), rule)


def documents_spec(info: dict) -> tuple[str | None, str]:
    """The ``--documents`` and ``--document-field`` a text provenance (``Text.provenance()``) was loaded with, read
    back from what ``load_documents`` records: a JSONL path, "articles", or None (one document, the whole text).

    >>> documents_spec({"source": "jsonl", "path": "/d.jsonl", "transform": "documents: 2 documents, field 'body' …"})
    ('/d.jsonl', 'body')
    >>> documents_spec({"source": "wikitext-2", "transform": "articles: 62 WikiText articles …"})
    ('articles', 'text')
    """
    transform = info.get("transform") or ""
    if info.get("source") == "jsonl":
        field = re.search(r"field '(.*?)'", transform)
        return info.get("path"), field.group(1) if field else "text"
    return ("articles" if transform.startswith("articles:") else None), "text"


def hf_wikitext_rows(raw: str) -> list[str]:
    """The rows of the Hugging Face ``wikitext`` dataset built from a raw file (``for row in open(file)``: lines
    split at "\\n" after universal newlines, each kept with its "\\n"), a row of only whitespace as "".

    >>> hf_wikitext_rows(" \\n = A = \\n x\\n")
    ['', ' = A = \\n', ' x\\n']
    """
    lines = raw.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    rows = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    return [row if row.strip() else "" for row in rows]


def gptq_text(text: Text) -> Text:
    """The GPTQ/AWQ evaluation string: a WikiText split's Hugging Face rows joined by "\\n\\n"; any other text as is."""
    if text.source not in WIKITEXT_DATASETS:
        return text
    joined = "\n\n".join(hf_wikitext_rows(text.text))
    return Text(
        joined,
        text.source,
        text.path,
        text.sha256,
        'gptq: the Hugging Face wikitext rows of the raw file (one per line, blank lines as "") joined by "\\n\\n"',
    )
