"""The insert side: validating and encoding what is inserted, combining concurrent inserts,
and inserting inside a caller's transaction.

``encode`` checks and encodes args and options before
anything touches the database; ``combiner`` runs
``Client.insert`` calls that arrive together as one statement;
``tx`` is the one path for inserts in a caller's
transaction. The statements themselves are ``drover._db.insert``'s.
"""
