"""Secure aggregation: the server learns sums of ``secagg.min_clients`` or more clients.

It never sees one client's vector.

Flower's SecAgg+ primitives (:mod:`flwr.common.secure_aggregation`: Shamir secret sharing,
ECDH-derived pairwise masks, Fernet-encrypted share exchange, stochastic quantisation) run inside
our own server loop, as four steps over :meth:`~rvfedprs.federation.task.Transport.query` — so the
same protocol, and the same sums, on the in-process engine and on both Flower engines. This is
SecAgg (Bonawitz et al. 2017, CCS) with every member of a group a neighbour of every other.

Protocol, per group (a *session*: fresh keys, seeds and shares; several groups run in one set of
exchanges, each site answering for all of its groups in one message):

1. ``secagg.keys`` — each member makes two key pairs (masking, encryption) and sends the public
   keys; the server refuses a key seen before (a reused round key);
2. ``secagg.share`` — each member draws a self-mask seed b_k, Shamir-shares b_k and its masking
   key (threshold t) among the members, encrypts each share for its holder and publishes the
   SHA-256 of every share;
3. ``secagg.mask`` — each member receives its encrypted shares, clips ω_k·v_k to ±c (a float
   vector, its public weight applied; integers are summed exactly), quantises it and sends
   y_k = q_k + PRG(b_k) + Σ_j ±PRG(s_kj) mod M, with the number of entries it clipped;
4. ``secagg.unmask`` — the members still in are asked, for each member, either the share of its
   self-mask seed (it sent y_k) or of its key (it dropped out, so that its pairwise masks can be
   removed) — never both; the server checks every share against its digest, rebuilds the seeds
   and keys from t of them and removes the masks from Σ y_k.

Modules: :mod:`~.protocol` (parameters, step names, quantisation and masks),
:mod:`~.site` (a site's answers; what it holds), :mod:`~.server` (:func:`~.server.secure_sum`),
:mod:`~.training` (a securely aggregated training round), :mod:`~.group_testing` (finding a
member that did not clip from subset sums).

**Generic use: summing any vector securely.** A task step computes the site's vector, holds it
in the site's step state instead of replying with it, and the server sums it::

    # site side, in a task step (Task.steps): e.g. the site-local preparation's allele counts
    from rvfedprs.federation.secagg.site import hold

    def allele_counts(self, site, payload, state):
        counts = ...                                      # int64, shape (n_variants,)
        hold(state, "allele-counts", {"counts": counts})  # stays on the site
        return {"n-variants": int(counts.size)}           # nothing individual in the reply

    # server side
    from rvfedprs.federation.secagg.protocol import SecAggParams
    from rvfedprs.federation.secagg.server import secure_sum
    from rvfedprs.strategies.secure import SumGroup

    transport.query({c: Request("allele_counts", {...}) for c in ids}, settings)
    outcome = secure_sum(
        transport, settings, {"all": SumGroup(tuple(ids), ("counts",))},   # weights=None: exact
        held="allele-counts", shapes={"counts": (n_variants,)},
        params=SecAggParams.from_config(config["secagg"]), random_seed=seed, label="allele counts",
    )
    total = outcome.sums["all"].total["counts"]           # Σ_k counts_k, int64, exact
    outcome.sums["all"].included                          # whose counts are in it
    outcome.dropped                                       # who is not, and why

Integer vectors are summed exactly (entries in [0, M / n)); float vectors are weighted by the
group's public ω_k and quantised, with an error below n·2c/R per entry
(:attr:`~rvfedprs.strategies.secure.GroupSum.error_bound`). A training round holds the
update Δw_k = w_k − w_sent (:func:`~.site.held_fit_result`) and the strategy names its groups
(:meth:`~rvfedprs.strategies.base.Strategy.secure_groups`).

**What the server sees.** Per client: its public keys, encrypted shares it cannot read, share
digests, a masked vector (uniform modulo M), how many of its entries it clipped to ±c, and for
a training round n_k, its training loss and — FedCE only — its Bloom filter, which the server
needs to cluster before it can ask for the cluster sums. Per group: the sum. Threat model: an
honest-but-curious server, colluding with fewer than t clients, learns nothing about an
individual vector beyond the group sum and its clip count (Bonawitz et al. 2017, §6,
semi-honest setting). Not covered: a server that lies to different clients about who dropped
out (the consistency round of the malicious-server variant is not run); a client that sends a
wrong vector within the bounds (poisoning: in a training round each client scales its update
to L2 norm ≤ ``secagg.update_norm_bound`` and clips its entries to ±c; a client that does not
clip is found by group testing when its sum's norm exceeds the bound, :mod:`~.group_testing`,
or stops the run when it cannot be isolated); and the strength of Flower's mask
generator (numpy's MT19937 seeded with 32 bits folded from each key). ``docs/DEPLOYMENT.md``
("Secure aggregation") states this for a deployment.
"""

from __future__ import annotations

__all__: list[str] = []
