"""The insert side: validating and encoding what is inserted, combining concurrent inserts,
and inserting inside a caller's transaction.

:mod:`~drover._insert.encode` checks and encodes args and options before
anything touches the database; :mod:`~drover._insert.combiner` runs
``Client.insert`` calls that arrive together as one statement;
:mod:`~drover._insert.tx` is the one path for inserts in a caller's
transaction. The statements themselves are :mod:`drover._db.insert`'s.
"""
