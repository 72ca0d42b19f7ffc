"""Other processes beside the store, read from ``/proc`` (or the root ``RETENTIOND_PROC_ROOT``
names): who has store files open or mapped and who holds the store's lock (``files``), the
broker process and how near its limits it is (``owner``), files in use across rounds and the
bytes unlinked files still occupy (``inuse``), and processes described with psutil
(``processes``). The engine's ``guard`` turns these into holds for a round.
"""
