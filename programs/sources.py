"""Where a program's cluster comes from: a text snapshot (`-t FILE`), a running cluster through
RAPI (`-m ADDRESS`) or LUXI (`-L[SOCKET]`). programs/options.py declares the options; programs
call this module.

A live source has a label, `rapi:ADDRESS` or `luxi:SOCKET`, that names it in reports and in
`exalloc batch` results (its key there, in place of a file name; a password in the address is
masked). See docs/live.md.
"""

from __future__ import annotations

import sys
from argparse import Namespace
from collections.abc import Sequence
from dataclasses import dataclass

from model.cluster import Cluster
from model.errors import InputError

LIVE_KINDS = ("rapi", "luxi")


@dataclass(frozen=True)
class ClusterSource:
    """One cluster to read: `kind` is text, rapi or luxi; `where` the file, address or socket
    (an empty socket means LUXI's default, resolved when read)."""

    kind: str
    where: str

    @property
    def live(self) -> bool:
        return self.kind in LIVE_KINDS

    @property
    def spec(self) -> str:
        """`rapi:ADDRESS` or `luxi:SOCKET` (the file for text): what `source_of_label` reads."""
        if self.kind == "text":
            return self.where
        return f"{self.kind}:{self.where or self._default_socket()}"

    @property
    def label(self) -> str:
        """The spec as reports show it: a password in a RAPI address is masked."""
        if self.kind == "rapi":
            from model.backends.rapi import shown

            return f"rapi:{shown(self.where)}"
        return self.spec

    @staticmethod
    def _default_socket() -> str:
        from model.backends.luxi import default_socket

        return default_socket()

    def load(self, *, static_kvm_node_memory: int = 4096) -> Cluster:
        """The cluster, read as htools reads it (errors: InputError, LiveSourceError)."""
        if self.kind == "rapi":
            from model.backends.rapi import load_rapi

            return load_rapi(self.where, static_kvm_node_memory=static_kvm_node_memory)
        if self.kind == "luxi":
            from model.backends.luxi import load_luxi

            return load_luxi(self.where or None, static_kvm_node_memory=static_kvm_node_memory)
        from model.backends.text import load_text

        return load_text(self.where)


def source_of(args: Namespace) -> ClusterSource:
    """The one source of `info` and `squeeze`: -t, -m or -L (exclusive:
    programs.options.cluster_source)."""
    if args.master is not None:
        return ClusterSource("rapi", args.master)
    if args.luxi is not None:
        return ClusterSource("luxi", args.luxi)
    return ClusterSource("text", args.text_data)


def cluster_of(args: Namespace) -> tuple[Cluster, ClusterSource]:
    """Load the source the options name (with `--static-kvm-node-memory` when given)."""
    source = source_of(args)
    return source.load(static_kvm_node_memory=args.static_kvm_node_memory), source


def htools_cluster(args: Namespace) -> tuple[Cluster, str, str]:
    """(cluster, label, the loader's warning) as `ExtLoader.loadExternalData` loads it for an
    htools program (programs.options.htools_source_options): one of -t, -m, -L or -I, else
    htools' own error; the warning on inconsistent data (model.htools.loader) unless `-q`
    brought the verbosity to 0. Not for -I: exalloc reads a request once, htools twice, and
    its second reading finds nothing missing."""
    from model.errors import HtoolsError
    from model.htools.loader import loading_warning

    given = [args.text_data is not None, args.master is not None, args.luxi is not None]
    if sum(given) > 1:
        raise HtoolsError("Only one of the rapi, luxi, and data files options should be given.")
    if any(given):
        cluster, source = cluster_of(args)
        warning = loading_warning(cluster) if args.verbose != 0 else ""
        return cluster, source.label, warning
    if args.ialloc_src is None:
        raise HtoolsError("failed to load data, aborting: No backend selected! Exiting.")
    from model.backends.iallocator import load_request

    request = load_request(args.ialloc_src, static_kvm_node_memory=args.static_kvm_node_memory)
    return request.cluster, args.ialloc_src, ""


def save_snapshot(cluster: Cluster, path: str) -> None:
    """`-S FILE`: the htools text snapshot, written atomically, reported on stderr as htools
    reports it."""
    from model.backends.text import save_text

    try:
        save_text(cluster, path)
    except OSError as exc:
        raise InputError(f"cannot write the snapshot: {exc.strerror}", source=path) from None
    print(f"The cluster state has been written to file '{path}'", file=sys.stderr)


def live_sources(args: Namespace) -> list[ClusterSource]:
    """The live clusters given to `compare` and `batch` (repeatable -m and -L), in order."""
    masters: Sequence[str] = args.master or ()
    sockets: Sequence[str] = args.luxi or ()
    return [ClusterSource("rapi", m) for m in masters] + [ClusterSource("luxi", s) for s in sockets]


def source_of_label(label: str) -> ClusterSource | None:
    """The live source a spec names (`rapi:ADDRESS`, `luxi:SOCKET`), None for a file."""
    kind, sep, where = label.partition(":")
    if sep and kind in LIVE_KINDS:
        return ClusterSource(kind, where)
    return None
