"""The Flower engines: Flower's simulation engine and a SuperLink/SuperNode deployment.

- :mod:`~rvfedprs.federation.flower.server_app` / :mod:`~rvfedprs.federation.flower.client_app`
  — the Flower App (one ServerApp, one ClientApp, for every task);
- :mod:`~rvfedprs.federation.flower.transport` — the server loop's transport on Flower's Grid;
- :mod:`~rvfedprs.federation.flower.records` — messages ⇄ Flower records, replies checked;
- :mod:`~rvfedprs.federation.flower.job` — the App, job and status files;
- :mod:`~rvfedprs.federation.flower.processes`, :mod:`~rvfedprs.federation.flower.superlink`,
  :mod:`~rvfedprs.federation.flower.submit`, :mod:`~rvfedprs.federation.flower.engine` —
  starting, watching and stopping the processes, submitting a job, collecting its results.

Importing this package does not import Flower's heavy modules; import the submodules.
"""
