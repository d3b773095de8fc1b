"""The size of the block behind each traced allocation, from the caching allocator's segment layout.

The allocator's history gives each allocation's address and *requested* size, but its `allocated_bytes`
counter counts whole blocks. A block is the request rounded to 512 B, unless the allocator handed out a whole
free block because the remainder was not worth splitting off. Without expandable segments, a large-pool
remainder of up to 1 MiB stays in the block: a "tail" no tensor owns. On a model of many such blocks the tails
add up to tens of MB, so a replay by requested sizes peaks below the counter (the scanner then had to guess
where the difference belonged, and put it in temporaries).

Replaying the layout makes it exact. Start from the segments and blocks of a snapshot taken when tracing
begins. Then, at each traced alloc, the free block at that address is known, and so is whether it was split.
The split rule mirrors `DeviceCachingAllocator::should_split` (c10/cuda/CUDACachingAllocator.cpp):
- the small pool, or any pool with expandable segments: split when ≥ 512 B remain;
- otherwise: split when the request is under `max_split_size` and more than 1 MiB remains.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

MIN_BLOCK = 512  # kMinBlockSize: every block is a multiple of it
SMALL_SIZE = 1 << 20  # kSmallSize: the large pool keeps a remainder up to this much in the block
SMALL_SEGMENT = 2 << 20  # kSmallBuffer: the small pool's segments, and only its segments, are this size


def rounded(nbytes: int) -> int:
    """The allocator's rounding of a request (round_size without power-of-two divisions)."""
    return max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)


@dataclass
class _Block:
    size: int
    free: bool
    small: bool  # small pool
    segment: int  # the segment's start address: blocks merge within a segment only
    segment_end: int


class BlockLayout:
    """The allocator's blocks, replayed entry by entry; `alloc` answers the bytes the counter adds."""

    def __init__(self, segments: list[dict], settings: dict | None = None, device: int = 0):
        settings = settings or {}
        self.expandable = bool(settings.get("expandable_segments", False))
        max_split = settings.get("max_split_size", -1)
        self.max_split = max_split if max_split and max_split > 0 else None
        self.unmatched = 0  # allocs at an address the layout had no free block for (rounded size used)
        self._blocks: dict[int, _Block] = {}
        self._start_of_end: dict[int, int] = {}  # block end address -> block start (to find the previous block)
        self._requested: dict[int, int] = {}  # address -> request, for blocks allocated at the snapshot
        for segment in segments:
            if segment.get("device", device) != device:
                continue
            start, end = segment["address"], segment["address"] + segment["total_size"]
            small = segment.get("segment_type") == "small"
            address = start
            for block in segment["blocks"]:
                self._put(address, _Block(block["size"], block["state"] == "inactive", small, start, end))
                if block["state"] == "active_allocated" and block.get("requested_size"):
                    self._requested[address] = block["requested_size"]
                address += block["size"]
        # Tail bytes of the blocks allocated when the layout was taken (their requests are in the snapshot).
        self.start_tails = sum(self._blocks[a].size - rounded(n) for a, n in self._requested.items())

    def requested_at_start(self, address: int) -> int | None:
        """The request behind a block allocated before the layout was taken (None for later ones)."""
        return self._requested.get(address)

    def _put(self, address: int, block: _Block) -> None:
        self._blocks[address] = block
        self._start_of_end[address + block.size] = address

    def _drop(self, address: int) -> _Block:
        block = self._blocks.pop(address)
        self._start_of_end.pop(address + block.size, None)
        return block

    def _splits(self, block: _Block, size: int) -> bool:
        remaining = block.size - size
        if block.small or self.expandable:
            return remaining >= MIN_BLOCK
        return (self.max_split is None or size < self.max_split) and remaining > SMALL_SIZE

    def alloc(self, address: int, requested: int) -> int:
        """The block size the allocator gave a request of `requested` bytes at `address`."""
        size = rounded(requested)
        block = self._blocks.get(address)
        if block is None or not block.free or block.size < size:
            self.unmatched += 1
            return size
        if self._splits(block, size):
            self._drop(address)
            self._put(address, _Block(size, False, block.small, block.segment, block.segment_end))
            self._put(address + size, _Block(block.size - size, True, block.small, block.segment, block.segment_end))
        else:
            block.free = False
        return self._blocks[address].size

    def size_of(self, address: int) -> int | None:
        block = self._blocks.get(address)
        return None if block is None else block.size

    def free(self, address: int) -> None:
        """The block at `address` back in its pool, merged with free neighbours of its segment."""
        block = self._blocks.get(address)
        self._requested.pop(address, None)
        if block is None:
            return
        block.free = True
        after = self._blocks.get(address + block.size)
        if after is not None and after.free and after.segment == block.segment:
            self._drop(address + block.size)
            self._drop(address)
            block = _Block(block.size + after.size, True, block.small, block.segment, block.segment_end)
            self._put(address, block)
        before_start = self._start_of_end.get(address)
        before = self._blocks.get(before_start) if before_start is not None else None
        if before is not None and before.free and before.segment == block.segment:
            self._drop(address)
            self._drop(before_start)
            self._put(before_start, _Block(before.size + block.size, True, block.small, block.segment,
                                           block.segment_end))

    def segment_alloc(self, address: int, size: int) -> None:
        """A new segment (cudaMalloc): one free block."""
        self._put(address, _Block(size, True, size == SMALL_SEGMENT, address, address + size))

    def segment_free(self, address: int, size: int) -> None:
        """A segment given back (empty_cache or an OOM retry): its blocks are gone."""
        for start in [a for a, b in self._blocks.items() if b.segment == address]:
            self._drop(start)
