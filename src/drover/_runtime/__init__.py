"""The running client's machinery: one module per background service.

Nothing here imports psycopg or holds SQL; database work goes through
``drover._db``. Each service owns one named thread, a stop event it sleeps on,
a ``run_once()`` that tests call directly, and a join on stop.
"""
