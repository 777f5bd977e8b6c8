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

from rvfedprs.simulate.demography import build_demography

__all__ = ["MsprimeSource", "BaldingNicholsSource", "individual_table"]

_BASES = np.array(list("ACGT"))


def individual_table(
    layout: pd.DataFrame, n_target: int, n_discovery: Sequence[int]
) -> pd.DataFrame:
    """One row per individual: each population's target individuals then its discovery ones."""
    frames = []
    for k, row in enumerate(layout.itertuples(index=False)):
        n_disc = int(n_discovery[k])
        frames.append(
            pd.DataFrame(
                {
                    "population": row.population,
                    "client": row.client,
                    "cluster": row.cluster,
                    "pop_index": k,
                    "role": ["target"] * n_target + ["discovery"] * n_disc,
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
    integers >= 1; alleles come from the JC69 nucleotide model (REF = ancestral state). Sites
    with more than two alleles are dropped and counted in ``n_multiallelic``.
    """

    def __init__(
        self,
        layout: pd.DataFrame,
        *,
        n_target: int,
        n_discovery: Sequence[int],
        chromosomes: Sequence[str],
        region_start: int,
        region_length: int,
        population_size: float,
        client_split_generations: float,
        cluster_split_generations: float,
        recombination_rate: float,
        mutation_rate: float,
        random_seed: int,
    ) -> None:
        import msprime

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
            msprime.SampleSet(n_target + int(n_discovery[k]), population=name, ploidy=2)
            for k, name in enumerate(layout["population"])
        ]
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
                ts, rate=mutation_rate, model="jc69", discrete_genome=True,
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
    """Independent loci under the Balding–Nichols model (numpy only; for scale benchmarks).

    Ancestral frequencies p ~ U(maf_min, 0.5); cluster frequencies ~ Beta(p(1-F)/F, (1-p)(1-F)/F)
    with F = ``fst_between`` around p, client frequencies likewise with F = ``fst_within`` around
    their cluster's; plus ``n_rare_per_cluster`` cluster-private rare variants with frequency
    U(rare_freq_min, rare_freq_max) in their cluster and 0 elsewhere. Genotypes are drawn
    chunk by chunk from a seed derived from (seed, chromosome, chunk), so any pass reproduces them.
    """

    def __init__(
        self,
        layout: pd.DataFrame,
        *,
        n_target: int,
        n_discovery: Sequence[int],
        chromosomes: Sequence[str],
        region_start: int,
        region_length: int,
        n_variants: int,
        n_rare_per_cluster: int,
        fst_within: float,
        fst_between: float,
        maf_min: float,
        rare_freq_min: float,
        rare_freq_max: float,
        chunk_variants: int,
        random_seed: int,
    ) -> None:
        self.layout = layout
        self.individuals = individual_table(layout, n_target, n_discovery)
        self.chromosomes = [str(c) for c in chromosomes]
        self.chunk_variants = int(chunk_variants)
        self.n_multiallelic = 0
        self.seed = int(random_seed)
        rng = np.random.default_rng([self.seed, 0])
        clusters = list(dict.fromkeys(layout["cluster"]))
        cluster_of_pop = np.array([clusters.index(c) for c in layout["cluster"]])
        n_chrom = len(self.chromosomes)
        self.tables: list[pd.DataFrame] = []
        self.freqs: list[np.ndarray] = []  # per chromosome, shape (n_populations, n_variants)
        offset = 0
        for c, chrom in enumerate(self.chromosomes):
            n_common = n_variants // n_chrom + (c < n_variants % n_chrom)
            n_rare = n_rare_per_cluster // n_chrom + (c < n_rare_per_cluster % n_chrom)
            p = rng.uniform(maf_min, 0.5, size=n_common)
            pc = _beta_around(rng, np.broadcast_to(p, (len(clusters), n_common)), fst_between)
            pk = _beta_around(rng, pc[cluster_of_pop], fst_within)
            rare = np.zeros((len(layout), n_rare * len(clusters)))
            for k in range(len(clusters)):
                f = rng.uniform(rare_freq_min, rare_freq_max, size=n_rare)
                rare[np.ix_(cluster_of_pop == k, np.arange(k * n_rare, (k + 1) * n_rare))] = f
            freqs = np.concatenate([pk, rare], axis=1)
            order = rng.permutation(freqs.shape[1])
            freqs = freqs[:, order]
            m = freqs.shape[1]
            if m > region_length:
                raise ValueError(f"{m} loci do not fit in a region of {region_length} bp")
            pos = region_start + np.sort(rng.choice(region_length, size=m, replace=False))
            pair = np.array([rng.choice(4, size=2, replace=False) for _ in range(m)]).reshape(m, 2)
            self.tables.append(
                _variant_table(
                    chrom, pos, _BASES[pair[:, 0]], _BASES[pair[:, 1]], offset + np.arange(m)
                )
            )
            self.freqs.append(freqs)
            offset += m
        self._offsets = np.cumsum([0] + [len(t) for t in self.tables])
        self._pop = self.individuals["pop_index"].to_numpy()

    @property
    def n_variants(self) -> int:
        """Loci over all chromosomes."""
        return int(self._offsets[-1])

    def _chunk(self, c: int, k: int) -> np.ndarray:
        """All individuals' genotypes of chunk ``k`` of chromosome ``c``."""
        lo = k * self.chunk_variants
        freqs = self.freqs[c][:, lo : lo + self.chunk_variants]
        rng = np.random.default_rng([self.seed, 1, c, k])
        p = freqs.T[:, self._pop]  # (m, n_individuals), variant-major
        return rng.binomial(2, p).astype(np.int8).T

    def iter_chunks(
        self, rows: np.ndarray, chunk_variants: int | None = None
    ) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
        """Stream all loci for individuals ``rows`` (chunking fixed at construction)."""
        rows = np.asarray(rows)
        for c, table in enumerate(self.tables):
            for k, lo in enumerate(range(0, len(table), self.chunk_variants)):
                yield table.iloc[lo : lo + self.chunk_variants], self._chunk(c, k).T[:, rows].T

    def fetch(self, sidx: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Genotypes of loci ``sidx`` for individuals ``rows``, shape (len(rows), len(sidx))."""
        sidx = np.asarray(sidx, dtype=np.int64)
        rows = np.asarray(rows)
        out = np.empty((len(rows), len(sidx)), dtype=np.int8)
        chrom_of = np.searchsorted(self._offsets, sidx, side="right") - 1
        local = sidx - self._offsets[chrom_of]
        chunk_of = local // self.chunk_variants
        for c, k in sorted(set(zip(chrom_of.tolist(), chunk_of.tolist(), strict=True))):
            block = self._chunk(c, k)[rows]
            sel = np.flatnonzero((chrom_of == c) & (chunk_of == k))
            out[:, sel] = block[:, local[sel] - k * self.chunk_variants]
        return out


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
