"""The ONNX node conformance cases through graphc.onnx.backend: nothing wrong, nothing
crashing, and a floor on how many pass (and on how many cases were found at all)."""
import collections

import pytest

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")

from graphc.onnx import conformance  # noqa: E402

NEW = tuple(int(p) for p in onnx.__version__.split(".")[:2]) >= (1, 23)
# cases collected / passing, measured: onnx 1.23: 1884 / 1572; onnx 1.17: 1288 / 1077
MIN_CASES = 1800 if NEW else 1200
MIN_PASSED = 1565 if NEW else 1070


@pytest.fixture(scope="module")
def results():
    return conformance.run()


def test_the_cases_were_found(results):
    assert len(results) >= MIN_CASES


def test_no_wrong_result_and_no_crash(results):
    bad = [f"{r.name}: {r.status}: {r.detail}" for r in results
           if r.status == conformance.ERROR or (r.status == conformance.WRONG and
                                                not conformance.reference_error(r.name))]
    assert not bad, "\n".join(bad)


def test_pass_floor(results):
    counts = collections.Counter(r.status for r in results)
    assert counts[conformance.PASS] >= MIN_PASSED, counts
    assert counts[conformance.PASS] >= 0.8 * len(results), counts


def test_every_refusal_names_the_op_or_the_input(results):
    for r in results:
        if r.status == conformance.UNSUPPORTED:
            assert r.op in r.detail or "input '" in r.detail or "opset" in r.detail, r
