"""One cleaning round for any store kind: the seam a kind implements (``kind``, with the value
types it speaks: ``decision``, ``identity``, ``runs``, ``disk``, ``figures``), the ``Cleaner``
that runs a round end to end (``cleaner``), the services a kind calls during it (``round``),
holds and forced deletion after the interval (``holds``, ``guard``), the only module that
deletes (``execute``), refused unlinks retried with backoff (``refused``) and faults counted
once (``faults``). Other processes beside the store, read from ``/proc``, are in ``proc``.

The engine imports no kind: ``docs/architecture.md`` draws where a kind plugs in.
"""
