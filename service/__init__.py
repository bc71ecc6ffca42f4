"""The live allocation service: exalloc answering concurrent clients on a running cluster.

Ganeti's lock manager (`locking`), the service's data and its journal (`state`, `journal`),
creations and verifies scheduled under those locks (`allocation`), the allocation server and
its clients' protocol (`server`, `client`), and the warm hail server behind `exalloc-hail`
(`hail_server`, `hail_client`). It may import model/, formulations/ and solvers/; only the
programs and cli.py import it (docs/architecture.md). `hail_client` imports nothing beyond
Python's start-up modules, so neither does this package's `__init__`.
"""
