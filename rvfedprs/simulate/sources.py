"""Genotype sources for the simulator: an msprime coalescent and a Balding–Nichols model.

A source holds a set of diploid individuals (target cohort and discovery cohort, in one table)
and streams biallelic variants in chunks, so that no full genotype matrix is ever held:

- ``individuals``: DataFrame with ``population, client, cluster, role`` (``target`` or
  ``discovery``), one row per individual;
- ``iter_chunks(rows, chunk_variants)`` yields ``(variants, genotypes)`` with ``variants`` a
  table (``sidx, chrom, pos, id, ref, alt``; ``sidx`` a running index over the source's variants)
  and ``genotypes`` int8 of shape (len(rows), n_variants), ALT-allele counts;
- ``fetch(sidx, rows)`` returns the genotypes of chosen variants, shape (len(rows), len(sidx)).

The same variants come out whatever ``rows`` asks for, so passes over different individuals line
up by ``sidx``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from rvfedprs.exceptions import ConfigError
from rvfedprs.simulate.demography import build_demography

__all__ = ["MsprimeSource", "BaldingNicholsSource", "OverlaySource", "individual_table"]


def individual_table(
    layout: pd.DataFrame, n_target: Sequence[int], n_discovery: Sequence[int]
) -> pd.DataFrame:
    """One row per individual: each population's target individuals then its discovery ones.

    ``n_target`` and ``n_discovery`` hold one count per population (row of ``layout``).
    """
    frames = []
    for k, row in enumerate(layout.itertuples(index=False)):
        n_disc = int(n_discovery[k])
        n_tgt = int(n_target[k])
        frames.append(
            pd.DataFrame(
                {
                    "population": row.population,
                    "client": row.client,
                    "cluster": row.cluster,
                    "pop_index": k,
                    "role": ["target"] * n_tgt + ["discovery"] * n_disc,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _variant_table(chrom: str, pos: np.ndarray, ref: np.ndarray, alt: np.ndarray, sidx: np.ndarray):
    ids = [f"{chrom}:{p}:{r}:{a}" for p, r, a in zip(pos, ref, alt, strict=True)]
    return pd.DataFrame(
        {
            "sidx": sidx,
            "chrom": chrom,
            "pos": pos.astype(np.int64),
            "id": ids,
            "ref": ref,
            "alt": alt,
        }
    )


class MsprimeSource:
    """Coalescent genotypes (msprime), one independent simulation per chromosome.

    Positions are ``region_start + site position`` on a discrete genome, so they are unique
    integers >= 1; alleles come from a nucleotide substitution matrix
    (:func:`rvfedprs.simulate.alleles.substitution_matrix`; REF = ancestral state, uniform at
    the root). Sites with more than two alleles are dropped and counted in ``n_multiallelic``.
    Diploid individuals are two haplotypes of one population, so genotypes are in
    Hardy–Weinberg equilibrium within each site.
    """

    def __init__(
        self,
        layout: pd.DataFrame,
        *,
        n_target: Sequence[int],
        n_discovery: Sequence[int],
        chromosomes: Sequence[str],
        region_start: int,
        region_length: int,
        population_size: float,
        client_split_generations: float,
        cluster_split_generations: float,
        recombination_rate: float,
        mutation_rate: float,
        substitutions: np.ndarray,
        random_seed: int,
    ) -> None:
        import msprime

        from rvfedprs.simulate.alleles import BASES

        self.layout = layout
        self.individuals = individual_table(layout, n_target, n_discovery)
        self.chromosomes = [str(c) for c in chromosomes]
        self.region_start = int(region_start)
        demography = build_demography(
            layout,
            population_size=population_size,
            client_split_generations=client_split_generations,
            cluster_split_generations=cluster_split_generations,
        )
        samples = [
            msprime.SampleSet(int(n_target[k]) + int(n_discovery[k]), population=name, ploidy=2)
            for k, name in enumerate(layout["population"])
        ]
        mutation_model = msprime.MatrixMutationModel(
            alleles=list(BASES),
            root_distribution=[0.25] * 4,
            transition_matrix=np.asarray(substitutions, dtype=float),
        )
        seeds = np.random.SeedSequence(random_seed).generate_state(2 * len(self.chromosomes))
        self.tree_sequences = []
        self.kept_sites: list[np.ndarray] = []
        self._alleles: list[tuple[np.ndarray, np.ndarray]] = []
        self._positions: list[np.ndarray] = []
        self.n_multiallelic = 0
        for c in range(len(self.chromosomes)):
            ts = msprime.sim_ancestry(
                samples,
                demography=demography,
                sequence_length=region_length,
                recombination_rate=recombination_rate,
                random_seed=int(seeds[2 * c]) + 1,
            )
            ts = msprime.sim_mutations(
                ts, rate=mutation_rate, model=mutation_model, discrete_genome=True,
                random_seed=int(seeds[2 * c + 1]) + 1,
            )  # fmt: skip
            kept, alt = _biallelic_sites(ts)
            self.n_multiallelic += int(ts.num_sites - kept.sum())
            site_ids = np.flatnonzero(kept)
            self.kept_sites.append(site_ids)
            self._alleles.append((_ancestral_states(ts)[site_ids], alt[site_ids]))
            self._positions.append(ts.tables.sites.position[site_ids].astype(np.int64))
            self.tree_sequences.append(ts)
        ts0 = self.tree_sequences[0]
        # haplotype nodes of each individual, in individual order
        nodes = np.full((ts0.num_individuals, 2), -1, dtype=np.int32)
        node_ind = ts0.tables.nodes.individual
        for node in ts0.samples():
            ind = node_ind[node]
            slot = 0 if nodes[ind, 0] < 0 else 1
            nodes[ind, slot] = node
        pops = ts0.tables.nodes.population[nodes[:, 0]]
        names = np.array([ts0.population(p).metadata["name"] for p in pops])
        if not np.array_equal(names, self.individuals["population"].to_numpy()):
            raise RuntimeError("msprime individuals are not in the expected population order")
        self._nodes = nodes
        self._offsets = np.cumsum([0] + [len(k) for k in self.kept_sites])

    @property
    def n_variants(self) -> int:
        """Biallelic variants over all chromosomes."""
        return int(self._offsets[-1])

    def _sample_nodes(self, rows: np.ndarray) -> np.ndarray:
        return self._nodes[np.asarray(rows)].ravel()

    def iter_chunks(
        self, rows: np.ndarray, chunk_variants: int
    ) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
        """Stream all biallelic variants for individuals ``rows`` (see the module docstring).

        The genotype arrays are transposed views of variant-major arrays (cheap to write out).
        """
        import tskit

        nodes = self._sample_nodes(np.asarray(rows))
        for c, (chrom, ts) in enumerate(zip(self.chromosomes, self.tree_sequences, strict=True)):
            sites = self.kept_sites[c]
            ref, alt = self._alleles[c]
            variant = tskit.Variant(ts, samples=nodes)
            for lo in range(0, len(sites), chunk_variants):
                hi = min(lo + chunk_variants, len(sites))
                hap = np.empty((hi - lo, len(nodes)), dtype=np.int8)
                for i, site in enumerate(sites[lo:hi]):
                    variant.decode(int(site))
                    hap[i] = variant.genotypes
                diploid = hap[:, 0::2] + hap[:, 1::2]  # (m, n_rows), variant-major
                pos = self.region_start + self._positions[c][lo:hi]
                table = _variant_table(
                    chrom, pos, ref[lo:hi], alt[lo:hi], self._offsets[c] + np.arange(lo, hi)
                )
                yield table, diploid.T

    def fetch(self, sidx: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Genotypes of variants ``sidx`` for individuals ``rows``, shape (len(rows), len(sidx))."""
        import tskit

        sidx = np.asarray(sidx, dtype=np.int64)
        nodes = self._sample_nodes(np.asarray(rows))
        out = np.empty((len(rows), len(sidx)), dtype=np.int8)
        chrom_of = np.searchsorted(self._offsets, sidx, side="right") - 1
        for c in np.unique(chrom_of):
            variant = tskit.Variant(self.tree_sequences[c], samples=nodes)
            for j in np.flatnonzero(chrom_of == c):
                variant.decode(int(self.kept_sites[c][sidx[j] - self._offsets[c]]))
                hap = variant.genotypes
                out[:, j] = hap[0::2] + hap[1::2]
        return out

    def tskit_fst(self, rows_by_population: Sequence[np.ndarray], pairs) -> np.ndarray:
        """Hudson Fst (tskit, site mode, averaged over chromosomes by segregating sites)."""
        values = []
        weights = []
        for ts in self.tree_sequences:
            sets = [self._sample_nodes(r) for r in rows_by_population]
            values.append(ts.Fst(sets, indexes=pairs, mode="site"))
            weights.append(ts.num_sites)
        return np.average(np.array(values), axis=0, weights=weights)


class BaldingNicholsSource:
    """Independent loci under the Balding–Nichols model (numpy only).

    Ancestral frequencies p ~ U(maf_min, 0.5); cluster frequencies ~ Beta(p(1-F)/F, (1-p)(1-F)/F)
    with F = ``fst_between`` around p, population (site) frequencies likewise with
    F = ``fst_within`` around their cluster's. Rare loci are added on top, with log-uniform
    frequencies in [rare_freq_min, rare_freq_max]: ``n_rare_per_cluster`` private to each
    cluster (that frequency in its populations, 0 elsewhere) and ``n_rare_shared`` at the same
    frequency in every population. With ``genes`` (``chrom, start, end``, 1-based inclusive:
    :mod:`rvfedprs.simulate.genes`), ``rare_loci_per_gene`` of each chromosome's rare loci,
    drawn at random, are moved to uniform positions inside each of its genes (genes hold most
    of an exome's rare variants); the others keep uniform positions over the region.
    Genotypes are Binomial(2, population frequency), so in Hardy–Weinberg equilibrium within
    each site, drawn locus by locus from a stream keyed by (seed, locus), so any pass or subset
    reproduces them; a rare locus (every population frequency below ``sparse_freq_max``) draws
    only its carriers, so its cost grows with the carriers, not the cohort. Alleles are drawn
    from the
    substitution matrix (:mod:`rvfedprs.simulate.alleles`).
    """

    def __init__(
        self,
        layout: pd.DataFrame,
        *,
        n_target: Sequence[int],
        n_discovery: Sequence[int],
        chromosomes: Sequence[str],
        region_start: int,
        region_length: int,
        n_variants: int,
        n_rare_per_cluster: int,
        n_rare_shared: int,
        fst_within: float,
        fst_between: float,
        maf_min: float,
        rare_freq_min: float,
        rare_freq_max: float,
        sparse_freq_max: float,
        substitutions: np.ndarray,
        random_seed: int,
        rare_loci_per_gene: int = 0,
        genes: pd.DataFrame | None = None,
    ) -> None:
        from rvfedprs.simulate.alleles import BASES

        self.layout = layout
        self.individuals = individual_table(layout, n_target, n_discovery)
        self.chromosomes = [str(c) for c in chromosomes]
        self.n_multiallelic = 0
        self.seed = int(random_seed)
        rng = np.random.default_rng([self.seed, 0])
        clusters = list(dict.fromkeys(layout["cluster"]))
        cluster_of_pop = np.array([clusters.index(c) for c in layout["cluster"]])
        n_chrom = len(self.chromosomes)
        cumulative = np.cumsum(np.asarray(substitutions, dtype=float), axis=1)
        bases = np.array(BASES)
        self.tables: list[pd.DataFrame] = []
        self.freqs: list[np.ndarray] = []  # per chromosome, shape (n_populations, n_variants)
        offset = 0
        genes_on = {} if genes is None else dict(list(genes.groupby(genes["chrom"].astype(str))))

        def rare_freqs(size: int) -> np.ndarray:
            low, high = np.log(rare_freq_min), np.log(rare_freq_max)
            return np.exp(rng.uniform(low, high, size=size))

        for c, chrom in enumerate(self.chromosomes):
            n_common = _share(n_variants, n_chrom, c)
            n_private = _share(n_rare_per_cluster, n_chrom, c)
            n_shared = _share(n_rare_shared, n_chrom, c)
            p = rng.uniform(maf_min, 0.5, size=n_common)
            pc = _beta_around(rng, np.broadcast_to(p, (len(clusters), n_common)), fst_between)
            pk = _beta_around(rng, pc[cluster_of_pop], fst_within)
            private = np.zeros((len(layout), n_private * len(clusters)))
            for k in range(len(clusters)):
                columns = np.arange(k * n_private, (k + 1) * n_private)
                private[np.ix_(cluster_of_pop == k, columns)] = rare_freqs(n_private)
            shared = np.broadcast_to(rare_freqs(n_shared), (len(layout), n_shared))
            freqs = np.concatenate([pk, private, shared], axis=1)
            order = rng.permutation(freqs.shape[1])
            freqs = freqs[:, order]
            m = freqs.shape[1]
            if m > region_length:
                raise ValueError(f"{m} loci do not fit in a region of {region_length} bp")
            pos = region_start + np.sort(rng.choice(region_length, size=m, replace=False))
            if chrom in genes_on:
                pos, moved = _into_genes(
                    rng, pos, order >= n_common, genes_on[chrom], rare_loci_per_gene, chrom
                )
                freqs = freqs[:, moved]
            ref = rng.integers(0, 4, size=m)
            alt = (rng.random(m)[:, None] >= cumulative[ref]).sum(axis=1).clip(max=3)
            self.tables.append(
                _variant_table(chrom, pos, bases[ref], bases[alt], offset + np.arange(m))
            )
            self.freqs.append(freqs)
            offset += m
        self._offsets = np.cumsum([0] + [len(t) for t in self.tables])
        self._pop = self.individuals["pop_index"].to_numpy()
        # P(at least one ALT copy) = 1 - q^2 and P(two) = p^2 per population and locus
        self._cuts = [np.stack([f * (2 - f), f * f]).astype(np.float32) for f in self.freqs]
        self._sparse = [f.max(axis=0, initial=0.0) < sparse_freq_max for f in self.freqs]
        # individuals come in one block per population (individual_table)
        populations = np.arange(len(layout))
        self._blocks = np.stack(
            [np.searchsorted(self._pop, populations, side=side) for side in ("left", "right")]
        )

    @property
    def n_variants(self) -> int:
        """Loci over all chromosomes."""
        return int(self._offsets[-1])

    def _genotypes(self, sidx: np.ndarray) -> np.ndarray:
        """Every individual's genotypes at loci ``sidx``, variant-major, int8.

        Each locus has its own random stream (Philox keyed by the seed and the locus), so any
        subset of loci is drawn alone and always gives the same genotypes: a common locus by
        :func:`_draw_dense`, a rare one (``sparse_freq_max``) by :func:`_draw_sparse`.
        """
        sidx = np.asarray(sidx, dtype=np.int64)
        out = np.zeros((len(sidx), len(self._pop)), dtype=np.int8)
        chrom_of = np.searchsorted(self._offsets, sidx, side="right") - 1
        for j, (s, c) in enumerate(zip(sidx.tolist(), chrom_of.tolist(), strict=True)):
            column = s - self._offsets[c]
            key = np.array([self.seed, s], dtype=np.uint64)
            rng = np.random.Generator(np.random.Philox(key=key))
            if self._sparse[c][column]:
                _draw_sparse(rng, self.freqs[c][:, column], self._blocks, out[j])
            else:
                carrier, homozygous = self._cuts[c][:, :, column]
                _draw_dense(rng, carrier[self._pop], homozygous[self._pop], out[j])
        return out

    def iter_chunks(
        self, rows: np.ndarray, chunk_variants: int
    ) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
        """Stream all loci for individuals ``rows``, ``chunk_variants`` at a time."""
        rows = np.asarray(rows)
        everyone = np.array_equal(rows, np.arange(len(self._pop)))  # no copy to pick rows
        for table in self.tables:
            for lo in range(0, len(table), chunk_variants):
                part = table.iloc[lo : lo + chunk_variants]
                genotypes = self._genotypes(part["sidx"].to_numpy())
                yield part, (genotypes if everyone else genotypes[:, rows]).T

    def fetch(self, sidx: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Genotypes of loci ``sidx`` for individuals ``rows``, shape (len(rows), len(sidx))."""
        return np.ascontiguousarray(self._genotypes(sidx)[:, np.asarray(rows)].T)


class OverlaySource:
    """A genotype source with the genotypes of a few variants replaced (founder enrichment).

    Parameters
    ----------
    base : MsprimeSource or BaldingNicholsSource
    replacements : dict
        ``sidx -> int8 array, shape (n_individuals,)``: the new ALT-allele counts of every
        individual (rows of ``base.individuals``).

    Everything else (``individuals``, ``n_variants``, ...) is the base source's.
    """

    def __init__(self, base, replacements: dict[int, np.ndarray]) -> None:
        self.base = base
        self.replacements = {int(k): np.asarray(v, dtype=np.int8) for k, v in replacements.items()}

    def __getattr__(self, name: str):
        return getattr(self.base, name)

    def _patch(self, sidx: np.ndarray, rows: np.ndarray, genotypes: np.ndarray) -> np.ndarray:
        for j in np.flatnonzero(np.isin(sidx, list(self.replacements))):
            genotypes[:, j] = self.replacements[int(sidx[j])][rows]
        return genotypes

    def iter_chunks(
        self, rows: np.ndarray, chunk_variants: int
    ) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
        """The base source's chunks, replaced variants patched in."""
        rows = np.asarray(rows)
        for variants, genotypes in self.base.iter_chunks(rows, chunk_variants):
            if self.replacements:
                self._patch(variants["sidx"].to_numpy(), rows, genotypes)
            yield variants, genotypes

    def fetch(self, sidx: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The base source's genotypes, replaced variants patched in."""
        sidx = np.asarray(sidx, dtype=np.int64)
        rows = np.asarray(rows)
        return self._patch(sidx, rows, self.base.fetch(sidx, rows))


def _draw_dense(
    rng: np.random.Generator, carrier: np.ndarray, homozygous: np.ndarray, out: np.ndarray
) -> None:
    """One locus, one uniform ``u`` per individual: ``[u < 1 - q^2] + [u < p^2]`` into ``out``.

    ``carrier`` and ``homozygous`` hold each individual's 1 - q^2 and p^2 (float32, shape
    (n_individuals,)); ``out`` is int8 of the same shape.
    """
    u = rng.random(len(out), dtype=np.float32)
    out[:] = (u < carrier).view(np.int8)
    out += u < homozygous


def _draw_sparse(
    rng: np.random.Generator, freqs: np.ndarray, blocks: np.ndarray, out: np.ndarray
) -> None:
    """One locus, carriers only: the same Hardy–Weinberg law as :func:`_draw_dense`.

    Per population k of n_k individuals at frequency p (q = 1 - p): carriers ~
    Binomial(n_k, 1 - q^2), chosen without replacement (uniform rows, a repeated row drawn
    again: the subset is uniform by symmetry); each carrier homozygous with probability
    p^2 / (1 - q^2). ``blocks`` holds each population's first and past-last row, shape
    (2, n_populations); ``out`` (int8, zeros) receives the ALT counts.
    """
    carrier = freqs * (2 - freqs)
    sizes = blocks[1] - blocks[0]
    counts = rng.binomial(sizes, carrier)
    total = int(counts.sum())
    if not total:
        return
    owner = np.repeat(np.arange(len(freqs)), counts)
    rows = blocks[0, owner] + rng.integers(0, sizes[owner])
    while total > 1:  # rows are global, so a repeat is within one population
        order = np.argsort(rows, kind="stable")
        again = order[1:][rows[order[1:]] == rows[order[:-1]]]  # every copy after the first
        if not len(again):
            break
        rows[again] = blocks[0, owner[again]] + rng.integers(0, sizes[owner[again]])
    share = freqs[owner] ** 2 / carrier[owner]
    out[rows] = 1 + (rng.random(total) < share)


def _into_genes(
    rng: np.random.Generator,
    pos: np.ndarray,
    rare: np.ndarray,
    genes: pd.DataFrame,
    per_gene: int,
    chrom: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Move ``per_gene`` random rare loci into each gene (free positions, uniform).

    Returns the new positions, sorted, and the column order that sorts them.
    """
    candidates = np.flatnonzero(rare)
    wanted = per_gene * len(genes)
    if wanted > len(candidates):
        raise ConfigError(
            f"'simulate.balding_nichols.rare_loci_per_gene': {per_gene} loci in each of the "
            f"{len(genes)} genes on chromosome {chrom} exceed its {len(candidates)} rare loci"
        )
    moved = rng.choice(candidates, size=wanted, replace=False)
    staying = np.setdiff1d(np.arange(len(pos)), moved)
    pos = pos.copy()
    for k, (start, end) in enumerate(zip(genes["start"], genes["end"], strict=True)):
        free = np.setdiff1d(np.arange(start, end + 1), pos[staying])
        pos[moved[k * per_gene : (k + 1) * per_gene]] = rng.choice(free, per_gene, replace=False)
        staying = np.r_[staying, moved[k * per_gene : (k + 1) * per_gene]]
    order = np.argsort(pos, kind="stable")
    return pos[order], order


def _share(total: int, parts: int, k: int) -> int:
    """Part ``k`` of ``total`` split as evenly as possible into ``parts``."""
    return total // parts + (k < total % parts)


def _ancestral_states(ts) -> np.ndarray:
    import tskit

    tables = ts.tables.sites
    return np.array(tskit.unpack_strings(tables.ancestral_state, tables.ancestral_state_offset))


def _biallelic_sites(ts) -> tuple[np.ndarray, np.ndarray]:
    """Which sites have exactly two alleles, and their non-ancestral allele."""
    import tskit

    mutations = ts.tables.mutations
    derived = np.array(
        tskit.unpack_strings(mutations.derived_state, mutations.derived_state_offset)
    )
    ancestral = _ancestral_states(ts)
    site = mutations.site
    frame = pd.DataFrame({"site": site, "state": derived})
    frame = frame[frame["state"].to_numpy() != ancestral[site]]
    distinct = frame.groupby("site")["state"].agg(["nunique", "first"])
    kept = np.zeros(ts.num_sites, dtype=bool)
    alt = np.full(ts.num_sites, "", dtype=object)
    ok = distinct.index.to_numpy()[distinct["nunique"].to_numpy() == 1]
    kept[ok] = True
    alt[distinct.index.to_numpy()] = distinct["first"].to_numpy()
    return kept, alt


def _beta_around(rng: np.random.Generator, p: np.ndarray, fst: float) -> np.ndarray:
    """Balding–Nichols draw: Beta(p(1-F)/F, (1-p)(1-F)/F), clipped away from 0 and 1."""
    scale = (1 - fst) / fst
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.clip(rng.beta(p * scale, (1 - p) * scale), 0.0, 1.0)
