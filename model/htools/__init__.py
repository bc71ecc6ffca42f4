"""htools' own algorithms (Ganeti 3.0.2), as pure functions over the immutable `ClusterState`.

A faithful port of what hail decides for normal and shared-storage groups (docs/hail.md,
"The htools core"): the same candidates in the same order, the same floating-point score, the
same tie-breaks and failure counts, so that `exalloc hail --capacity-checks greedy` prints
byte for byte what the real hail prints.

* `metrics`: the cluster score exactly as htools computes it (two-pass statistics, the
  incremental update of pair allocation), and candidate ranking with exact tie-breaks;
* `capacity`: the pluggable global N+1 check (`CapacityCheck`): `none`, and the interface an
  exact check implements;
* `global_n1`: htools' greedy N+1 check (GlobalN1.hs), the `greedy` implementation;
* `solutions`: allocation solutions, hail's consultation of the N+1 check and its texts;
* `allocate`: allocate and multi-allocate (tryAlloc, findBestAllocGroup, allocList);
* `evacuate`: relocate, node-evacuate and change-group (Evacuate.hs, tryChangeGroup);
* `allocate_secondary`: allocate-secondary;
* `requests`: one IAllocator request in, hail's answer out (IAlloc.processRequest).
"""
