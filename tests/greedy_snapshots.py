"""Text snapshots shared by the tests that hold the greedy ports to the real htools."""

#: A group reduced from benchmarks/greedy_diff.py's finds (nodes with free spindles, no
#: exclusive storage; nodeC backs a small drbd instance of nodeA loaded before a larger one of
#: nodeB; nodeA reports 1,536 MiB less free memory than its instances leave, a loader warning)
PEERS_SNAPSHOT = """\
default|uuid-g|preferred||

nodeA|32768|1024|17408|512000|307200|8|N|uuid-g|1||N|1|1|1.0
nodeB|32768|1024|30720|512000|307200|8|N|uuid-g|1||N|1|1|1.0
nodeC|32768|1024|31744|512000|512000|8|N|uuid-g|1||N|1|1|1.0

inst1|8192|102400|2|running|Y|nodeA|nodeB|drbd||1|-|N
inst2|4096|102400|2|running|Y|nodeA|nodeB|drbd||1|-|N
inst3|1024|1024|1|running|Y|nodeB|nodeC|drbd||1|-|N
inst4|512|1024|1|running|Y|nodeA|nodeC|drbd||1|-|N
inst5|2048|1024|1|running|Y|nodeB|nodeC|drbd||1|-|N


|1024,1,10240,1,1,1|128,1,1024,1,1,1;32768,8,1048576,16,8,12|plain,drbd|4.0|32.0
"""


def without(snapshot: str, names: tuple[str, ...]) -> str:
    """The snapshot with the lines of the named nodes or instances left out."""
    return "".join(
        line for line in snapshot.splitlines(keepends=True) if line.split("|")[0] not in names
    )
