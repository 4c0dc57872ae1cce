"""``python -m runner batch DIR -o OUTDIR``: every image of a folder, each a full guarded job,
with a resumable JSON manifest — one after another here (``runner.batch.folder.Batch``, where
the manifest and the resume rules are described), or at once on a Ray cluster with
``--cluster`` (``runner.cluster.batch.ClusterBatch``)."""
from __future__ import annotations

from meshfacts.errors import RunnerError
from runner.batch.folder import Batch
from runner.cluster.batch import ClusterBatch, check_cluster_options
from runner.cluster.placement import record_raw
from runner.commands.cli import (
    ArgumentParser,
    add_job_arguments,
    guard_config,
    internal_failure,
    require_path,
    setup,
    usage_failure,
    validate_job,
)


def build_parser() -> ArgumentParser:
    """Parser of ``python -m runner batch``."""
    parser = ArgumentParser(prog="python -m runner batch",
                            description="Every image in DIR → OUTDIR/<name>.glb, one after "
                                        "another, each under the guard; resumable manifest.")
    parser.add_argument("input_dir", metavar="DIR", help="folder of images")
    parser.add_argument("-o", "--output-dir", required=True, metavar="OUTDIR",
                        help="folder for the GLBs, traces and manifest.json")
    add_job_arguments(parser, "batch")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m runner batch DIR -o OUTDIR …``: returns 0 when every image is done or
    skipped, ``batch_failed`` (5) when any failed, another kind's code for a batch-level error
    (missing folder, cancel …)."""
    parser = build_parser()
    try:
        raw = record_raw(parser)  # the option texts a cluster node's job is given
        ns = parser.parse_args(argv)
        require_path(ns.output_dir, "output folder")
        options = validate_job(ns)
        config = guard_config(ns)
        check_cluster_options(ns)
    except RunnerError as err:
        return usage_failure(err, "batch", argv)
    emitter, cancel = setup(ns)
    if ns.cluster is not None:
        batch = ClusterBatch(ns, options, config, emitter, cancel, parser=parser, raw=raw)
    else:
        batch = Batch(ns, options, config, emitter, cancel)
    try:
        return batch.run()
    except RunnerError as err:
        return batch.fail(err)
    except Exception as exc:  # a bug: one error event, the traceback on stderr only
        return internal_failure(emitter, exc)
    finally:
        cancel.uninstall()
