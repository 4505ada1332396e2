"""``infoeval.compare`` and ``infoeval.compress_bits``: the commands quantize-compare and compress-bits as functions,
their options as keyword arguments with the command line's defaults; the CLI's commands call them.

    import infoeval
    result = infoeval.compare(schemes=("int8-channel", "int4-g128"), max_tokens=2048)
    result.to_frame()            # summary.csv's table
    result.positions             # positions.csv's table (built when first asked for)
    result.save("results/run")   # what the command line writes

A bad value raises ``infoeval.UsageError`` (or ``DataError`` for bad text) with one line, before anything loads
where it can be checked then.
"""

from __future__ import annotations

from infoeval.api.requests import takes
from infoeval.comparison.request import CompareRequest, CompressRequest


def _reporter(progress: bool):
    from infoeval.output.tables import RichReporter

    return RichReporter(enabled=progress)


def _prepared(request):
    """The reference (a spec, or a ``ModelObject`` of a loaded model and its tokenizer) and the request's model
    settings (device and dtype 'auto' are a model object's own)."""
    import dataclasses

    from infoeval.models.objects import model_object, own_settings

    reference = model_object(request.model.model, request.tokenizer)
    own = own_settings(reference, {"device": request.model.device, "dtype": request.model.dtype})
    return reference, dataclasses.replace(request.model, model=reference, **own)


def _run(request, pipeline, *args, **kwargs):
    """``pipeline(model settings, text settings, window settings, *args, **kwargs)`` on the request's model (an
    object in memory is used where it is, and left as it was: ``models.objects.evaluating``)."""
    from infoeval.models.objects import evaluating

    model, model_settings = _prepared(request)
    with evaluating(model):
        return pipeline(model_settings, request.text, request.window, *args, **kwargs)


@takes(CompareRequest, "quantize-compare")
def compare(request: CompareRequest):
    """quantize-compare: the reference and each variant (``schemes``, ``recipes``, ``checkpoints``: saved folders,
    .gguf files or hub ids, and ``variants``: name → a module you built, sharing the reference's tokenizer) on the
    same windows; returns the ``CompareResult`` holding its per-position table. Called with keywords (those of
    ``CompareRequest``: ``text``, ``dataset``, ``max_tokens``, ``ctx``, ``protocol``, ``device``, ``dtype``, …), a
    ``CompareRequest``, or ``config=`` a TOML file of them. ``model``: a spec string, or a loaded transformers model
    with its ``tokenizer`` (used where it is; ``device``/``dtype`` 'auto' mean its own). With ``until_se``,
    ``max_tokens`` is the budget of the run to a precision (not given: the whole text). ``baseline``: one of the
    variants; every other is compared with it on the same positions, verdicts at ``alpha`` (default 0.05;
    ``result.paired``). ``plan``: "auto", "lockstep" or "reference-first", chosen against ``memory_budget`` (GiB;
    None: 90 % of the memory available) before anything loads (``result.memory_plan``)."""
    from infoeval.comparison.compare import quantize_compare
    from infoeval.comparison.frames import positions_frame
    from infoeval.models.objects import evaluating

    reference, model_settings = _prepared(request)
    variants = request.variants
    with evaluating(reference, *variants.modules):
        result, cols = quantize_compare(
            model_settings,
            request.text,
            request.window,
            variants,
            _reporter(request.progress),
            request.until(),
            request.top_k,
            request.paired(),
            request.plan_settings(),
        )
    return result.with_positions(lambda: positions_frame(cols.reference, cols.variants), cols)


@takes(CompressRequest, "compress-bits")
def compress_bits(request: CompressRequest):
    """compress-bits: the model's code length for the text beside gzip, bz2, xz and zstd on the same bytes (and with
    ``verify_coding`` a real arithmetic-coded file of them); returns the ``CompressBitsResult`` with its positions.
    Called as ``compare`` is (keywords of ``CompressRequest``, a request, or ``config=``)."""
    from infoeval.comparison.compare import compress_bits as run_compress_bits
    from infoeval.comparison.frames import positions_frame
    from infoeval.models.objects import evaluating

    reference, model_settings = _prepared(request)
    with evaluating(reference):
        result, cols = run_compress_bits(
            model_settings,
            request.text,
            request.window,
            _reporter(request.progress),
            verify_coding=request.verify_coding,
            until=request.until(),
            top_k=request.top_k,
        )
    return result.with_positions(lambda: positions_frame(cols.reference, {}), cols)
