"""Readers and writers of the formats Ganeti speaks: the htools text snapshot and IAllocator JSON.

Each produces or consumes the same `model.cluster.Cluster`, so every program works on any input.
"""
