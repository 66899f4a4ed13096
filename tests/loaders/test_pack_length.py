"""CorgiPileDataset(batching=TokenRows(L)): rows of exactly L tokens cut from real token packs (`corgi pack
--tokenizer`): every token of the epoch once across ranks and workers, equal items on every rank, unsplit
documents, the waste reported, exact resume, refused options and corrupt sizes."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from corgi_io.errors import ArgumentError, CorruptDataError, ResumeError
from corgi_io.loaders import Batches, Blend, CorgiPileDataset, Ranks, Shuffle, TokenRows
from helpers.packs import token_pack

pytest.importorskip("tokenizers")
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 3 workers on a 2-core machine
L, EOS = 32, 0


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """240 tokenised texts of 1..120 words (some longer than a row), in blocks of 6."""
    lengths = np.random.default_rng(3).integers(1, 121, 240)
    return token_pack(tmp_path_factory, "rows", lengths, block_samples=6)


@pytest.fixture(scope="module")
def documents(packed):
    """{sample index: its token ids}, read as samples."""
    return {s["index"]: s["data"].tolist()
            for s in CorgiPileDataset(packed, shuffle=Shuffle("none"), decode="tokens")}


def rank_items(packed, world_size, workers=0, balance="count", **rows):
    """Every rank's items through a DataLoader with `workers` workers (`rows`: TokenRows' options)."""
    out = []
    for rank in range(world_size):
        ds = CorgiPileDataset(packed, seed=1, ranks=Ranks(balance=balance, rank=rank, world_size=world_size),
                              batching=TokenRows(L, **rows))
        items = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))
        assert len(items) == len(ds)
        out.append(items)
    return out


def rows_of(items) -> list:
    """(input_ids, document_ids, position_ids) of each row, as lists."""
    rows = []
    for item in items:
        ids, docs, pos = (item[k].reshape(-1, L).tolist() for k in ("input_ids", "document_ids", "position_ids"))
        rows += zip(map(tuple, ids), map(tuple, docs), map(tuple, pos))
    return rows


def reassembled(rows) -> dict:
    """{document: its tokens}, its pieces concatenated in row order; checks the positions restart at each piece."""
    found = {}
    for ids, docs, pos in rows:
        for column, (token, doc) in enumerate(zip(ids, docs)):
            if doc >= 0:
                fresh = column == 0 or docs[column - 1] != doc
                assert pos[column] == (0 if fresh else pos[column - 1] + 1)
                found.setdefault(doc, []).append(token)
    return found


def check_item(item, batch):
    assert item["input_ids"].shape == item["position_ids"].shape == item["document_ids"].shape == (batch, L)
    assert item["input_ids"].dtype == torch.int64 and item["cu_seqlens"].dtype == torch.int32
    starts = torch.nonzero(item["position_ids"].reshape(-1) == 0).reshape(-1)
    assert item["cu_seqlens"].tolist() == starts.tolist() + [batch * L]
    assert item["max_seqlen"] == int(torch.diff(item["cu_seqlens"]).max())


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("balance", ["count", "size"])
def test_every_token_once_across_ranks_in_rows_of_exactly_l(packed, documents, world_size, balance):
    ranks = rank_items(packed, world_size, eos_id=EOS, batch_size=4, balance=balance)
    for items in ranks:
        for item in items[:-1]:
            check_item(item, 4)
    found = [reassembled(rows_of(items)) for items in ranks]
    assert sum(len(f) for f in found) == len(documents)
    merged = {doc: tokens for f in found for doc, tokens in f.items()}
    assert merged == {doc: tokens + [EOS] for doc, tokens in documents.items()}
    waste = 1 - sum(len(t) + 1 for t in documents.values()) / sum(len(rows_of(i)) * L for i in ranks)
    assert waste == pytest.approx(CorgiPileDataset(packed, seed=1,
                                                   ranks=Ranks(balance=balance, rank=0, world_size=world_size),
                                                   batching=TokenRows(L, batch_size=4, eos_id=EOS)).planner.waste())


@pytest.mark.slow
@pytest.mark.parametrize("world_size, workers", [(1, 1), (2, 2), (3, 2), (1, 3)])
def test_workers_yield_the_same_rows(packed, world_size, workers):
    alone = rank_items(packed, world_size, 0, batch_size=3)
    shared = rank_items(packed, world_size, workers, batch_size=3)
    for one, many in zip(alone, shared):
        assert Counter(rows_of(one)) == Counter(rows_of(many))


def test_unsplit_documents_start_a_row_and_the_waste_is_reported(packed, documents):
    ds = CorgiPileDataset(packed, batching=TokenRows(L, eos_id=EOS, split_documents=False, pad_id=7))
    rows = rows_of(list(ds))
    assert reassembled(rows) == {doc: tokens + [EOS] for doc, tokens in documents.items()}
    pieces = Counter(doc for _, docs, pos in rows for doc, p in zip(docs, pos) if doc >= 0 and p == 0)
    for doc, count in pieces.items():  # one piece, or a longer document over whole rows
        assert count == max(1, -(-(len(documents[doc]) + 1) // L))
    pads = [token for ids, docs, _ in rows for token, doc in zip(ids, docs) if doc < 0]
    assert set(pads) == {7} and len(pads) / (len(rows) * L) == pytest.approx(ds.planner.waste())
    split = CorgiPileDataset(packed, batching=TokenRows(L, eos_id=EOS))
    assert split.planner.waste() < 0.005 < ds.planner.waste() and len(split) < len(ds)


def test_one_row_per_item_without_batch_size(packed):
    item = next(iter(CorgiPileDataset(packed, batching=TokenRows(L))))
    assert item["input_ids"].shape == (L,) and item["cu_seqlens"][-1] == L


def test_batches_of_rows_are_not_taken_for_fast_raw_batches(packed):
    """TokenRows(batch_size=B) is B rows per item, not Batches(B) of raw samples: the numpy raw-batch path is off."""
    assert not CorgiPileDataset(packed, batching=TokenRows(L, batch_size=2)).fast_batches


def states_after(ds, steps):
    loader = StatefulDataLoader(ds, batch_size=None, num_workers=0)
    it = iter(loader)
    head = [next(it) for _ in range(steps)]
    return head, loader.state_dict()


@pytest.mark.parametrize("split", [True, False])
def test_resume_mid_epoch_gives_the_rest_exactly(packed, split):
    options = dict(batching=TokenRows(L, batch_size=2, eos_id=EOS, split_documents=split), seed=5)
    whole = rows_of(list(CorgiPileDataset(packed, **options)))
    head, state = states_after(CorgiPileDataset(packed, **options), 7)
    resumed = CorgiPileDataset(packed, **options)
    loader = StatefulDataLoader(resumed, batch_size=None, num_workers=0)
    loader.load_state_dict(state)
    assert rows_of(head) + rows_of(list(loader)) == whole


@pytest.mark.slow
def test_resume_with_workers_and_with_another_worker_count(packed):
    options = dict(batching=TokenRows(L, batch_size=2), seed=2)
    loader = StatefulDataLoader(CorgiPileDataset(packed, **options), batch_size=None, num_workers=2)
    whole = rows_of(list(loader))
    loader = StatefulDataLoader(CorgiPileDataset(packed, **options), batch_size=None, num_workers=2)
    it = iter(loader)
    head = rows_of([next(it) for _ in range(5)])
    state = loader.state_dict()
    del it
    again = StatefulDataLoader(CorgiPileDataset(packed, **options), batch_size=None, num_workers=2)
    again.load_state_dict(state)
    assert head + rows_of(list(again)) == whole
    fewer = CorgiPileDataset(packed, **options)  # another worker count: the dataset takes the loader's state
    fewer.load_state_dict(state)
    rest = rows_of(list(StatefulDataLoader(fewer, batch_size=None, num_workers=1)))
    assert Counter(head + rest) == Counter(whole)


def test_resume_with_another_world_size_is_refused(packed):
    _, state = states_after(CorgiPileDataset(packed, ranks=Ranks(rank=0, world_size=2), batching=TokenRows(L)), 3)
    other = CorgiPileDataset(packed, ranks=Ranks(rank=0, world_size=3), batching=TokenRows(L))
    other.load_state_dict(state)
    with pytest.raises(ResumeError, match="world size"):
        next(iter(other))
    single = CorgiPileDataset(packed, ranks=Ranks(rank=0, world_size=2), batching=TokenRows(L + 1))
    with pytest.raises(ResumeError, match="pack_length"):
        single.load_state_dict(state)


@pytest.mark.parametrize("options, message", [
    ({"decode": "rgb"}, "decode 'rgb'"), ({"transform": lambda x: x}, "a transform"),
    ({"shuffle": Shuffle("window")}, r"Shuffle\('window'\)"), ({"ranks": Ranks(drop_last=True)}, r"Ranks\(drop_last=True\)"),
])
def test_options_rows_do_not_take_are_refused(packed, options, message):
    with pytest.raises(ArgumentError, match=f"^TokenRows packs token rows itself: it does not take {message}"):
        CorgiPileDataset(packed, batching=TokenRows(L), **options)


@pytest.mark.parametrize("make, message", [(lambda: TokenRows(0), "^row length must be >= 1, got 0$"),
                                           (lambda: TokenRows(L, eos_id=-1), "^eos_id must be >= 0 or None, got -1$")])
def test_bad_row_options_are_refused(make, message):
    with pytest.raises(ArgumentError, match=message):
        make()


def test_row_options_cannot_be_written_without_rows_or_with_batches():
    """Row options are TokenRows' own: no eos_id without a row length, no length grouping of rows."""
    with pytest.raises(TypeError):
        TokenRows(eos_id=2)
    with pytest.raises(TypeError):
        TokenRows(L, group_by_size=True)
    with pytest.raises(TypeError):
        Batches(2, eos_id=2)


def test_rows_need_a_token_pack_and_no_blend(packed, tmp_path_factory):
    with pytest.raises(ArgumentError, match="TokenRows do not apply to a Blend"):
        CorgiPileDataset(Blend({"a": packed, "b": packed}), batching=TokenRows(L))
    from helpers.packs import text_pack
    with pytest.raises(ArgumentError, match=r"\.npy"):
        CorgiPileDataset(text_pack(tmp_path_factory, "plain", [3, 4]), batching=TokenRows(L))


def test_a_size_that_is_not_the_token_count_is_corrupt_data(packed, monkeypatch):
    ds = CorgiPileDataset(packed, shuffle=Shuffle("none"), batching=TokenRows(L))
    sizes = np.array(ds.manifest.samples.size)
    sizes[10] += 1  # and one less for the next sample of its block: the block's sum (which the manifest checks) holds
    sizes[11] -= 1
    monkeypatch.setitem(ds.manifest.samples.arrays, "size", sizes)
    with pytest.raises(CorruptDataError, match="manifest says") as caught:
        list(ds)
    assert caught.value.key == ds.manifest.keys(10, 11)[0] and caught.value.shard.endswith(".tar")


@pytest.mark.parametrize("split, batch", [(True, 3), (False, 2), (False, None)])
def test_items_do_not_depend_on_the_rows_built_at_once(packed, monkeypatch, split, batch):
    """Chunks of one item, of a few items and of the whole epoch give the same items (cu_seqlens, max_seqlen too)."""
    from corgi_io.loaders import token_rows as rows

    def items(slots):
        monkeypatch.setattr(rows, "CHUNK_SLOTS", slots)
        ds = CorgiPileDataset(packed,
                              batching=TokenRows(L, batch_size=batch, eos_id=EOS, split_documents=split, pad_id=3))
        return [{k: v.tolist() if torch.is_tensor(v) else v for k, v in item.items()} for item in ds]

    one = items(1)
    assert items(5 * L) == one and items(1 << 30) == one
    assert len(one) == len(CorgiPileDataset(packed,
                                            batching=TokenRows(L, batch_size=batch, eos_id=EOS, split_documents=split)))


class FakeReader:
    """A PieceReader's face for `TokenPieces`: one piece of .npy payloads, each `gap` bytes after the last."""

    def __init__(self, documents: list, gap: int, dtype=np.uint16):
        import io
        from types import SimpleNamespace
        data, begins = b"", []
        for document in documents:
            payload = io.BytesIO()
            np.lib.format.write_array(payload, np.asarray(document, dtype), allow_pickle=False)
            begins.append(len(data) + gap)
            data += b"\x00" * gap + payload.getvalue()
        self.data = data
        nbytes = np.diff(begins + [len(data)]) - np.append(np.full(len(documents) - 1, gap), 0)
        samples = SimpleNamespace(data_offset=np.array(begins), offset=np.zeros(len(documents), np.int64),
                                  bytes=nbytes, size=np.array([len(d) for d in documents]))
        self.manifest = SimpleNamespace(samples=samples)

    def read_piece(self, piece):
        return self.data


@pytest.mark.parametrize("gap, viewed", [(0, True), (1, False), (3, False)])
def test_piece_tokens_view_aligned_payloads_and_copy_the_others(gap, viewed):
    from corgi_io.loaders.token_pieces import PieceStep, TokenPieces
    documents = [[5, 6, 7], [], [9] * 40, [1, 65535]]
    piece = TokenPieces(FakeReader(documents, gap)).read(PieceStep((0, 0, len(documents))))
    assert piece.first == 0 and isinstance(piece.tokens.base, bytes) == viewed
    for document, offset in zip(documents, piece.offsets.tolist()):
        assert piece.tokens[offset:offset + len(document)].tolist() == document


def test_buffer_tokens_joins_pieces_in_sample_order_with_the_end_and_padding_ids_last():
    from corgi_io.loaders.token_pieces import PieceTokens, buffer_tokens
    late = PieceTokens(10, np.array([0, 40, 41, 0, 42], np.uint16), np.array([1, 4]))  # samples 10 and 11
    early = PieceTokens(3, np.array([30, 31, 32], np.uint16), np.array([0, 2]))  # samples 3 and 4
    tokens, offsets = buffer_tokens([late, early], np.array([11, 3, 10, 4]), [2, 70000])
    assert tokens.dtype == np.uint32 and tokens[-2:].tolist() == [2, 70000]  # the padding id does not fit uint16
    assert tokens[offsets].tolist() == [42, 30, 40, 32]
    small, _ = buffer_tokens([late, early], np.array([3]), [2, 1])
    assert small.dtype == np.uint16 and small.tolist() == [30, 31, 32, 0, 40, 41, 0, 42, 2, 1]


def test_buffer_tokens_views_the_array_its_pieces_were_read_into_when_the_ids_fit():
    from corgi_io.loaders.token_pieces import PieceStep, PieceTokens, buffer_tokens
    sink = np.zeros(8 + 8 + 16, np.uint8)
    sink[:6].view(np.uint16)[:] = [1, 2, 3]
    sink[8:12].view(np.uint16)[:] = [4, 5]
    pieces = [PieceTokens(2, sink[8:12].view(np.uint16), np.array([1]), PieceStep((0, 2, 3), sink, 8)),
              PieceTokens(0, sink[:6].view(np.uint16), np.array([0, 1]), PieceStep((0, 0, 2), sink, 0))]
    tokens, offsets = buffer_tokens(pieces, np.array([2, 0, 1]), [7, 9])
    assert np.shares_memory(tokens, sink) and tokens[-2:].tolist() == [7, 9] and tokens[offsets].tolist() == [5, 1, 2]
    wide, offsets = buffer_tokens(pieces, np.array([2, 0, 1]), [7, 70000])  # the padding id needs a wider dtype
    assert not np.shares_memory(wide, sink) and wide[-2:].tolist() == [7, 70000]
    assert wide[offsets].tolist() == [5, 1, 2]


def test_a_local_pack_is_read_into_one_array_per_buffer_not_joined(packed, documents, monkeypatch):
    from corgi_io.loaders import token_pieces

    def joined(*args):
        raise AssertionError("a local pack's pieces were copied into a second array")

    monkeypatch.setattr(token_pieces, "joined_tokens", joined)
    ds = CorgiPileDataset(packed, batching=TokenRows(L, batch_size=2, eos_id=EOS))
    assert reassembled(rows_of(list(ds))) == {doc: tokens + [EOS] for doc, tokens in documents.items()}


def npy(values, dtype) -> bytes:
    import io

    out = io.BytesIO()
    np.lib.format.write_array(out, np.asarray(values, dtype), allow_pickle=False)
    return out.getvalue()


def test_npy_layout_flags_the_payloads_whose_header_differs_from_the_first():
    from corgi_io.loaders.token_pieces import npy_layout

    first = npy([1, 2, 3], np.uint16)
    parts = [first, npy([4], np.int32), npy([5] * 10, np.uint16), b"\x93NUMPY", b"X" + first[1:], npy([6], np.uint16)]
    begins = np.cumsum([0] + [len(part) for part in parts[:-1]])
    dtype, same, skips = npy_layout(b"".join(parts), begins, np.array([len(part) for part in parts]))
    assert dtype == np.uint16 and same.tolist() == [True, False, True, False, False, True]
    assert skips[[0, 2, 5]].tolist() == [len(first) - 6, len(parts[2]) - 20, len(parts[5]) - 2]


@pytest.mark.parametrize("dtype", ["<u2", ">i8", "|u1", "<i4"])
def test_npy_layout_reads_a_header_without_ast(monkeypatch, dtype):
    """Reading threads parse headers at once: ast.literal_eval there can raise SystemError on CPython < 3.11.8."""
    import ast

    from corgi_io.loaders.token_pieces import npy_layout

    def refuse(*args):
        raise AssertionError("ast.literal_eval in a reading thread")

    monkeypatch.setattr(ast, "literal_eval", refuse)
    parts = [npy([1, 2, 3], dtype), npy(list(range(40)), dtype)]
    layout = npy_layout(b"".join(parts), np.array([0, len(parts[0])]), np.array([len(part) for part in parts]))
    assert layout[0] == np.dtype(dtype) and layout[1].tolist() == [True, True]


@pytest.mark.parametrize("array", [np.zeros((2, 2), np.int32), np.zeros(3, np.float32), np.asfortranarray(np.zeros(3))])
def test_npy_layout_leaves_other_arrays_to_the_slow_path(array):
    from corgi_io.loaders.token_pieces import npy_layout

    data = npy(array, array.dtype)
    assert npy_layout(data, np.array([0]), np.array([len(data)])) is None


@pytest.mark.parametrize("batch, rows", [(1, 1), (3, 10), (4, 8), (2, 0), (5, 1 << 20)])
def test_a_chunk_holds_no_more_items_than_the_worker_has_rows(monkeypatch, batch, rows):
    """However large CHUNK_SLOTS is, a chunk is at most the worker's rows rounded up to whole items (at least
    one item): sized by CHUNK_SLOTS alone, a chunk of 2^30 slots held 8 GiB for a few hundred rows."""
    from corgi_io.loaders import token_rows as row_module

    monkeypatch.setattr(row_module, "CHUNK_SLOTS", 1 << 30)
    got = row_module.chunk_rows(batch, L, rows)
    assert got % batch == 0 and batch <= got <= max(batch, -(-rows // batch) * batch)
    monkeypatch.setattr(row_module, "CHUNK_SLOTS", 4 * L)  # a chunk of 4 rows' slots: the smaller bound wins
    assert row_module.chunk_rows(1, L, 10) == 4 and row_module.chunk_rows(1, L, 2) == 2
