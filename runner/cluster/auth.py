"""Token authentication with a Ray cluster, decided before Ray is imported.

Ray (2.52 and later; this project pins 2.60) authenticates every RPC and HTTP call of a cluster
started with ``RAY_AUTH_MODE=token`` by one shared token (Ray's docs, "Ray token
authentication"; ``ray/_private/authentication``). A process finds the token in Ray's own
sources, highest first: ``$RAY_AUTH_TOKEN`` (the token itself), ``$RAY_AUTH_TOKEN_PATH`` (a
file; unreadable or empty is an error, never a fall-back) and Ray's default file
``~/.ray/auth_token`` (what ``ray get-auth-token --generate`` writes). A driver sends the token
only when its own ``RAY_AUTH_MODE`` is ``token``, read once when Ray is imported; without it a
token cluster answers ``ray.init`` with 20 s of retries and a bare ``ConnectionError``.

So before importing Ray the runner asks the head's GCS one cheap question (its
``NodeInfoGcsService/GetClusterId`` call, ``src/ray/protobuf/gcs_service.proto``) through
gRPC, once without a token: ``UNAUTHENTICATED`` means the cluster requires one. Then once with
the token found here: refused means it is the wrong token. Either is one ``cluster_auth`` error
that says where the token was looked for or came from; an accepted token sets
``RAY_AUTH_MODE=token`` for this process, so ``ray.init`` sends it. ``--cluster-token-file``
(the add-on's preference) points ``RAY_AUTH_TOKEN_PATH`` at a file: the token itself never
travels on a command line or in a preference. ``auto`` and ``ray://`` addresses are not asked
(no GCS address here): a token found here turns token mode on, as Ray itself does for
``auto``, and a refusal is mapped from Ray's ``AuthenticationError``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from meshfacts.errors import RunnerError

MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
PROBE_TIMEOUT = 5.0
"""Seconds the GCS may take to answer the question (it answers in milliseconds)."""
PROBE_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
"""A GCS call every client makes first and that takes an empty request; token clusters check
its ``authorization: Bearer TOKEN`` metadata (Ray's gRPC authentication interceptors)."""
SOURCES = f"${TOKEN_ENV}, ${TOKEN_PATH_ENV} or ~/.ray/auth_token"
_FIX = ("Copy the cluster's token (on the head: `ray get-auth-token` prints it; it is in "
        "~/.ray/auth_token there) into ~/.ray/auth_token on this machine, or give its file "
        "with --cluster-token-file FILE (the add-on: Preferences › Cluster token file); "
        "docs/cluster.md.")


@dataclass(frozen=True)
class Token:
    """A token found here: ``value`` (whitespace stripped, as Ray reads a token file) and
    ``source``, where it came from in words for a person (never the token itself)."""

    value: str
    source: str


def default_token_path() -> Path:
    """Ray's default token file, ``~/.ray/auth_token`` (``ray get-auth-token --generate``)."""
    return Path.home() / ".ray" / "auth_token"


def require_cluster_for_token(ns) -> None:
    """Refuse ``--cluster-token-file`` without ``--cluster`` (``RunnerError('usage')``)."""
    if getattr(ns, "cluster_token_file", None) and ns.cluster is None:
        raise RunnerError("usage", "--cluster-token-file is the token of a Ray cluster, and no "
                          "--cluster was given.", "Give --cluster ADDRESS with it, or leave "
                          "it out to run here.")


def auth_error(address: str, message: str, hint: str = _FIX) -> RunnerError:
    """A ``cluster_auth`` error naming ``address``."""
    return RunnerError("cluster_auth", message, hint, address=address)


def use_token_file(path: str, address: str) -> Token:
    """``--cluster-token-file PATH``: the token in that file, and Ray told to read it from
    there (``$RAY_AUTH_TOKEN_PATH``, absolute; a ``$RAY_AUTH_TOKEN`` of the environment would
    win over it in Ray, so it is dropped for this process). Raises ``cluster_auth`` when the
    file cannot be read or is empty."""
    full = Path(path).expanduser().absolute()
    source = f"--cluster-token-file {full}"
    token = Token(_read_token_file(full, source, address), source)
    os.environ.pop(TOKEN_ENV, None)
    os.environ[TOKEN_PATH_ENV] = str(full)
    return token


def _read_token_file(path: Path, source: str, address: str) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise auth_error(address, f"The token file {path} ({source}) cannot be read "
                         f"({reason}), so the Ray cluster at {address} cannot be reached.",
                         "Give a file you can read that holds the cluster's token (it is "
                         "~/.ray/auth_token on the head) with --cluster-token-file FILE (the "
                         "add-on: Preferences › Cluster token file) or $RAY_AUTH_TOKEN_PATH; "
                         "docs/cluster.md.") from None
    if not text:
        raise auth_error(address, f"The token file {path} ({source}) is empty, so the Ray "
                         f"cluster at {address} cannot be reached.",
                         "Copy the cluster's token into it (on the head: `ray get-auth-token` "
                         "prints it; it is ~/.ray/auth_token there), or give another file with "
                         "--cluster-token-file FILE; docs/cluster.md.")
    return text


def find_token(address: str) -> Token | None:
    """The token Ray would use here, in Ray's order (``$RAY_AUTH_TOKEN``,
    ``$RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``), or None. Raises ``cluster_auth`` for a
    ``$RAY_AUTH_TOKEN_PATH`` that cannot be read or is empty (Ray refuses it too)."""
    value = os.environ.get(TOKEN_ENV, "").strip()
    if value:
        return Token(value, f"${TOKEN_ENV}")
    named = os.environ.get(TOKEN_PATH_ENV)
    if named:
        source = f"the file {named} named by ${TOKEN_PATH_ENV}"
        return Token(_read_token_file(Path(named), source, address), source)
    default = default_token_path()
    if default.is_file():
        return Token(_read_token_file(default, "Ray's default token file", address),
                     f"Ray's default token file {default}")
    return None


def gcs_requires_token(host: str, port: int, token: str | None = None) -> bool | None:
    """Ask the GCS at ``host:port`` the :data:`PROBE_METHOD` question, with ``token`` as a
    bearer token when given: False when it answers, True when it refuses as
    ``UNAUTHENTICATED``, None when it cannot tell (no answer in :data:`PROBE_TIMEOUT`, not a
    Ray GCS): then ``ray.init`` finds out. grpcio comes with Ray."""
    import grpc  # Ray's dependency: only a cluster command that asks the head imports it

    metadata = [("authorization", f"Bearer {token}")] if token else None
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(PROBE_METHOD)  # bytes in and out: the request is empty
        try:
            call(b"", timeout=PROBE_TIMEOUT, metadata=metadata)
        except grpc.RpcError as exc:
            return True if exc.code() == grpc.StatusCode.UNAUTHENTICATED else None
    return False


@dataclass(frozen=True)
class Auth:
    """What the runner learned: ``required`` (the cluster requires a token; None: not asked or
    no answer) and ``token_from`` (where the token it will send comes from, None: none)."""

    required: bool | None
    token_from: str | None

    def fields(self) -> dict:
        """The ``auth`` field of ``check --cluster``'s ``cluster``."""
        return {"required": self.required, "token_from": self.token_from}


def prepare(address: str, where: tuple[str, int] | None, token_file: str | None) -> Auth:
    """Settle authentication with the cluster at ``address`` (``where``: its GCS ``(host,
    port)``, None for ``auto`` and ``ray://`` addresses) before Ray is imported; sets
    ``RAY_AUTH_MODE=token`` for this process when a token will be sent. Raises
    ``cluster_auth``: the cluster requires a token and none was found here, or refused the one
    found, or the token file cannot be read."""
    token = use_token_file(token_file, address) if token_file else find_token(address)
    required = None
    if where is not None and not address.startswith("ray://"):
        required = gcs_requires_token(*where)
        if required and token is None:
            raise auth_error(address, f"The Ray cluster at {address} requires a token (it "
                             f"was started with {MODE_ENV}=token) and none was found here "
                             f"(${TOKEN_ENV}, ${TOKEN_PATH_ENV}, ~/.ray/auth_token, "
                             "--cluster-token-file).")
        if required and gcs_requires_token(*where, token.value):
            raise auth_error(address, f"The Ray cluster at {address} refused the token from "
                             f"{token.source}: it is not the token the cluster was started "
                             "with.")
    if token is not None and required is not False:
        os.environ[MODE_ENV] = "token"
    return Auth(required, token.source if token is not None and required is not False
                else None)


def refused(address: str, exc: BaseException) -> RunnerError | None:
    """The ``cluster_auth`` error for what ``ray.init`` raised when it is Ray's
    ``AuthenticationError`` (an ``auto`` or ``ray://`` address, or a token cluster reached
    without the question), else None."""
    if type(exc).__name__ != "AuthenticationError":
        return None
    first = str(getattr(exc, "message", exc)).strip().split(". ")[0][:300]
    return auth_error(address, f"The Ray cluster at {address} did not accept this machine: "
                      f"{first} (the token is looked for in {SOURCES}, or "
                      "--cluster-token-file).")
