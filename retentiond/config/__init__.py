"""Configuration every store kind shares: the ``retentiond:`` block (``daemon``,
``metrics``), the YAML and Java-properties readers (``readers``, ``properties``), the
key-table machinery (``keys``, ``table``, ``reference``), one error model naming file, key and
value (``problems``), the file read once for the kinds to claim (``loader``), reload diffs
(``diff``) and the generic ``Settings`` (``settings``). Each kind's own keys live in
``kinds/<kind>/config.py``; nothing here names one."""
