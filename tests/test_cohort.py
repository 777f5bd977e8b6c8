import numpy as np
import pandas as pd
import pytest

from rvfedprs import cohort
from rvfedprs.exceptions import InputDataError


def write_tsv(path, frame):
    frame.to_csv(path, sep="\t", index=False)
    return path


@pytest.fixture
def sheet_path(tmp_path):
    frame = pd.DataFrame({"sample_id": ["S1", "S2", "S3"], "client": ["a", "a", "b"]})
    return write_tsv(tmp_path / "samples.tsv", frame)


def test_crlf_is_named_with_file_and_line(tmp_path):
    path = tmp_path / "samples.tsv"
    path.write_bytes(b"sample_id\tclient\nS1\ta\r\nS2\tb\r\n")
    with pytest.raises(InputDataError, match=r"samples.tsv has Windows \(CRLF\).*line 2"):
        cohort.load_samples_sheet(path)


def test_gzipped_crlf_detected(tmp_path):
    import gzip

    path = tmp_path / "score.txt.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b"#genome_build=GRCh37\r\nrsID\n")
    with pytest.raises(InputDataError, match="CRLF"):
        cohort.check_line_endings(path)


def test_samples_sheet_duplicates_are_named(tmp_path):
    frame = pd.DataFrame({"sample_id": ["S1", "S2", "S1", "S3", "S3"], "client": list("aabbb")})
    path = write_tsv(tmp_path / "s.tsv", frame)
    with pytest.raises(
        InputDataError, match=r"2 duplicate ID\(s\) in samples sheet .*S1 \(x2\), S3"
    ):
        cohort.load_samples_sheet(path)


def test_samples_sheet_missing_column_lists_present_columns(tmp_path):
    path = write_tsv(tmp_path / "s.tsv", pd.DataFrame({"sample_id": ["S1"], "site": ["a"]}))
    with pytest.raises(
        InputDataError, match=r"lacks column\(s\) \['client'\]; it has \['sample_id', 'site'\]"
    ):
        cohort.load_samples_sheet(path)


def test_samples_sheet_empty_client_named(tmp_path):
    frame = pd.DataFrame({"sample_id": ["S1", "S2"], "client": ["a", ""]})
    with pytest.raises(InputDataError, match="1 sample.* have no client: S2"):
        cohort.load_samples_sheet(write_tsv(tmp_path / "s.tsv", frame))


def test_phenotype_coding_missing_values_excluded_and_other_values_refused(tmp_path):
    frame = pd.DataFrame(
        {
            "eid": ["f1", "f2", "f3", "f4", "f5"],
            "Subject id": ["S1", "S2", "S3", "S4", "S5"],
            "smoked": ["Yes", "No", "Do not know", "Yes", "NA"],
        }
    )
    path = write_tsv(tmp_path / "p.tsv", frame)
    with pytest.raises(InputDataError) as error:  # 'Do not know' is not coded: a data error
        cohort.load_phenotypes(path, column="smoked", cases=["Yes"], controls=["No"])
    said = str(error.value)
    assert "1 value(s) are neither a case ['Yes'], a control ['No'] nor missing" in said
    assert "'Do not know' (samples S3 (line 4))" in said and "pipeline.phenotype.missing" in said
    table, excluded = cohort.load_phenotypes(
        path, column="smoked", cases=["Yes"], controls=["No"], missing=["Do not know"]
    )
    assert table["sample_id"].tolist() == ["S1", "S2", "S4"]
    assert table["phenotype"].tolist() == [1, 0, 1]
    assert table["phenotype"].dtype == np.int8
    assert excluded["id"].tolist() == ["S3", "S5"]
    assert excluded["reason"].tolist() == [
        "phenotype 'smoked' missing ('Do not know')",
        "phenotype 'smoked' missing ('NA')",
    ]
    assert list(excluded.columns) == list(cohort.EXCLUSION_COLUMNS)


def test_numeric_phenotype_codes_match_as_numbers(tmp_path):
    frame = pd.DataFrame({"Subject id": ["S1", "S2"], "disease": ["1.0", "0"]})
    table, excluded = cohort.load_phenotypes(write_tsv(tmp_path / "p.tsv", frame), column="disease")
    assert table["phenotype"].tolist() == [1, 0] and excluded.empty


def test_missing_phenotype_column_lists_columns(tmp_path):
    frame = pd.DataFrame({"Subject id": ["S1"], "disease": ["1"]})
    with pytest.raises(InputDataError, match=r"lacks column\(s\) \['asthma'\]"):
        cohort.load_phenotypes(write_tsv(tmp_path / "p.tsv", frame), column="asthma")


def test_sample_mismatch_lists_names_per_source():
    sheet = pd.DataFrame({"sample_id": ["S1", "S2", "S3"], "client": ["a", "a", "b"]})
    phen = pd.DataFrame({"sample_id": ["S1", "S2", "S9"], "phenotype": [0, 1, 1]})
    with pytest.raises(InputDataError) as info:
        cohort.reconcile_samples(["S1", "S2", "S3", "S4"], sheet, phen)
    message = str(info.value)
    assert "1 sample(s) in phenotype table are absent from genotypes: S9" in message
    assert "1 sample(s) in genotypes are absent from samples sheet: S4" in message
    assert "2 sample(s) in genotypes are absent from phenotype table: S3, S4" in message


def test_sample_mismatch_exclude_logs_every_sample_and_keeps_genotype_order():
    sheet = pd.DataFrame({"sample_id": ["S3", "S1", "S2"], "client": ["b", "a", "a"]})
    phen = pd.DataFrame({"sample_id": ["S2", "S1", "S9", "S3"], "phenotype": [0, 1, 1, 0]})
    kept, excluded = cohort.reconcile_samples(
        ["S2", "S4", "S3", "S1"], sheet, phen, on_mismatch="exclude"
    )
    assert kept["sample_id"].tolist() == ["S2", "S3", "S1"]
    assert kept["client"].tolist() == ["a", "b", "a"]
    assert sorted(excluded["id"]) == ["S4", "S9"]
    assert set(excluded["kind"]) == {"sample"}


def make_cohort(clients):
    rows = []
    for client, (n, n_cases) in clients.items():
        rows += [
            {"sample_id": f"{client}_{i}", "client": client, "phenotype": int(i < n_cases)}
            for i in range(n)
        ]
    return pd.DataFrame(rows)


def test_single_class_and_small_clients_are_excluded_and_logged():
    data = make_cohort({"ok": (30, 5), "allcontrols": (30, 0), "tiny": (5, 2)})
    kept, excluded = cohort.check_clients(data, min_samples=20)
    assert set(kept["client"]) == {"ok"}
    clients = excluded[excluded["kind"] == "client"].set_index("id")["reason"]
    assert "single phenotype class (30 controls" in clients["allcontrols"]
    assert "5 samples, fewer than min_samples_per_client=20" in clients["tiny"]
    assert (excluded["kind"] == "sample").sum() == 35


def test_single_class_client_error_names_client():
    data = make_cohort({"ok": (30, 5), "allcases": (25, 25)})
    with pytest.raises(
        InputDataError, match=r"client 'allcases' has a single phenotype class \(25 cases"
    ):
        cohort.check_clients(data, min_samples=20, on_invalid="error")


def test_no_client_left_is_an_error():
    with pytest.raises(InputDataError, match="no client left"):
        cohort.check_clients(make_cohort({"a": (30, 0)}), min_samples=20)


def test_stratified_split_is_seeded_and_stratified():
    y = np.array([1] * 10 + [0] * 90)
    split = cohort.stratified_split(y, test_fraction=0.2, random_seed=3)
    assert (split[y == 1] == "test").sum() == 2
    assert (split[y == 0] == "test").sum() == 18
    again = cohort.stratified_split(y, test_fraction=0.2, random_seed=3)
    other = cohort.stratified_split(y, test_fraction=0.2, random_seed=4)
    assert (split == again).all() and (split != other).any()


def test_small_class_keeps_one_sample_on_each_side():
    y = np.array([1, 1] + [0] * 8)
    split = cohort.stratified_split(y, test_fraction=0.2, random_seed=0)
    assert sorted(split[:2]) == ["test", "train"]


def test_client_split_does_not_depend_on_other_clients():
    both = make_cohort({"a": (40, 8), "b": (40, 8)})
    alone = make_cohort({"a": (40, 8)})
    split_both = cohort.assign_splits(both, test_fraction=0.25, random_seed=1)
    split_alone = cohort.assign_splits(alone, test_fraction=0.25, random_seed=1)
    assert (split_both[both["client"] == "a"].to_numpy() == split_alone.to_numpy()).all()


def test_samples_sheet_from_psam(tmp_path):
    path = tmp_path / "x.psam"
    path.write_text("#IID\tSEX\tSuperPop\tPopulation\nHG1\t1\tEUR\tGBR\nHG2\t2\tAFR\tYRI\n")
    sheet = cohort.samples_sheet_from_psam(path)
    assert sheet.to_dict("list") == {
        "sample_id": ["HG1", "HG2"],
        "client": ["GBR", "YRI"],
        "population": ["GBR", "YRI"],
    }
    with pytest.raises(InputDataError, match=r"lacks column\(s\) \['Region'\]"):
        cohort.samples_sheet_from_psam(path, column="Region")


def _covariate_table(tmp_path, rows):
    path = tmp_path / "pheno.tsv"
    path.write_text("Subject id\tdisease\tage\tsex\tPC1\n" + "".join(r + "\n" for r in rows))
    return path


def test_covariates_are_float64_in_file_order_and_missing_ones_excluded_or_kept(tmp_path):
    from rvfedprs.cohort import impute_covariates, load_covariates

    path = _covariate_table(
        tmp_path,
        ["a\t1\t50\t0\t0.1", "b\t0\tNA\t1\t-0.2", "c\t0\t40\t1\t", "d\t1\t60\t0\t0.3"],
    )
    kept, excluded = load_covariates(path, columns=["age", "sex", "PC1"])
    assert kept["sample_id"].tolist() == ["a", "d"]
    assert kept.dtypes[["age", "sex", "PC1"]].tolist() == [np.float64] * 3
    assert excluded["id"].tolist() == ["b", "c"]
    assert excluded["reason"].tolist() == [
        "covariate(s) ['age'] missing",
        "covariate(s) ['PC1'] missing",
    ]
    table, none = load_covariates(path, columns=["PC1", "age"], on_missing="impute_mean")
    assert none.empty and list(table.columns) == ["sample_id", "PC1", "age"]
    filled, imputed = impute_covariates(table, ["PC1", "age"])
    assert imputed == {"PC1": ["c"], "age": ["b"]}
    assert filled["age"].tolist() == [50.0, 50.0, 40.0, 60.0]
    assert filled["PC1"].iloc[2] == pytest.approx((0.1 - 0.2 + 0.3) / 3)


def test_non_numeric_or_reserved_covariates_are_errors_naming_column_sample_value(tmp_path):
    from rvfedprs.cohort import impute_covariates, load_covariates

    path = _covariate_table(tmp_path, ["a\t1\t50\tmale\t0.1", "b\t0\t51\t0\t0.2"])
    with pytest.raises(InputDataError, match=r"covariate 'sex' .* sample 'a': 'male'"):
        load_covariates(path, columns=["age", "sex"])
    with pytest.raises(InputDataError, match=r"lacks column\(s\) \['PC2'\]"):
        load_covariates(path, columns=["PC2"])
    with pytest.raises(InputDataError, match=r"\['phenotype'\] would overwrite samples.parquet"):
        load_covariates(path, columns=["phenotype"])
    empty = pd.DataFrame({"sample_id": ["a"], "age": [np.nan]})
    with pytest.raises(InputDataError, match=r"'age' is missing for all 1 samples"):
        impute_covariates(empty, ["age"])
