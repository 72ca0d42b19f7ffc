"""The write-ahead deletion journal: records written and fsynced before anything else hears
of a deletion (``writer``), where it lives (``place``), memory spooling on a full disk
(``spool``), reconciliation of intents a crash left open (``reconcile``), idle rounds folded
into summaries (``rollup``), reading it back (``query``) and shipping closed segments to the
fleet (``ship``). ``docs/journal.md`` is the contract.
"""
