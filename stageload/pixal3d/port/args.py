"""The port's own argument namespace for a run: built by the port's ``parse_args`` (so its
defaults and checks apply: ``--native-remesh`` on, projection 0.9 at 0be9e69a) from the
adapter's options plus the user's extra port options (``--port-arg``)."""
from __future__ import annotations

import inspect
import sys
from typing import Optional, Sequence

from stageload.pixal3d.errors import KnobRefused

PLACEHOLDER_IMAGE = "image.png"


def call_parse_args(gm, argv: Sequence[str]):
    """``gm.parse_args(argv)`` (0be9e69a takes ``argv``; older ports read ``sys.argv``, which is
    swapped for the call). Raises ``KnobRefused`` naming the options the port's parser
    rejected (argparse's own message goes to stderr)."""
    try:
        takes_argv = bool(inspect.signature(gm.parse_args).parameters)
    except (TypeError, ValueError):
        takes_argv = False
    old = sys.argv
    try:
        if takes_argv:
            return gm.parse_args(list(argv))
        sys.argv = [str(getattr(gm, "__file__", "generate_mps.py"))] + list(argv)
        return gm.parse_args()
    except SystemExit:
        raise KnobRefused(f"The port's parse_args rejected the options {' '.join(argv[1:])}.",
                          "See the port's `python generate_mps.py --help` for its options and "
                          "values.",
                          tuple(a for a in argv[1:] if a.startswith("-"))) from None
    finally:
        sys.argv = old


def given_options(gm, extra: Sequence[str]) -> list:
    """argparse dests that ``extra`` (the user's port options) sets to something other than the
    port's default."""
    if not extra:
        return []
    base = vars(call_parse_args(gm, [PLACEHOLDER_IMAGE]))
    mine = vars(call_parse_args(gm, [PLACEHOLDER_IMAGE, *extra]))
    return sorted(k for k, v in mine.items() if base.get(k, object()) != v)


def port_namespace(gm, *, model_path: str, pipeline_type: str, seed: int, texture_size: int,
                   extra: Sequence[str] = (), output: Optional[str] = None,
                   fov: Optional[float] = None, steps: Optional[int] = None,
                   max_num_tokens: int = 49152,
                   no_texture: bool = False):
    """The namespace the port's functions receive: the adapter's own values (the run's
    ``RunOptions``: no default of their own here), then ``extra``."""
    argv = [PLACEHOLDER_IMAGE, "--model-path", model_path, "--pipeline-type", pipeline_type,
            "--seed", str(seed), "--texture-size", str(texture_size)]
    if output is not None:
        argv += ["--output", str(output)]
    if fov is not None and fov > 0:
        argv += ["--fov", repr(float(fov))]
    if steps is not None:
        argv += ["--steps", str(int(steps))]
    if max_num_tokens != 49152:
        argv += ["--max-num-tokens", str(int(max_num_tokens))]
    if no_texture:
        argv.append("--no-texture")
    return call_parse_args(gm, argv + list(extra))
