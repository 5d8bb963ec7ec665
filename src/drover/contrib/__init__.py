"""Framework integrations: ``drover.contrib.django`` and ``drover.contrib.sqlalchemy``.

Each imports its framework, so import the one you use (the ``django`` and
``sqlalchemy`` extras install them). The core package never imports either.
"""
