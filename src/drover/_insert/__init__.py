"""The insert side: the one funnel every insert goes through (ADR 0047).

``funnel`` checks and encodes an insert call's input (``encode``, with the
unique identity of ``identity`` and the dependencies of ``graph``), fixes
its route, and runs the insert middleware around the write; the writers
carry the route out: ``combiner`` (concurrent ``Client.insert`` calls
combined into one statement) and the client's pool for the client's own
transactions, ``tx`` for a caller's transaction, ``aio_tx`` for
``AsyncClient``. The statements themselves are ``drover._db``'s.
"""
