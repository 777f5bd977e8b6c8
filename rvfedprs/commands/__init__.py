"""Sub-commands of the ``rvfedprs`` command line (see ``rvfedprs.cli``)."""
