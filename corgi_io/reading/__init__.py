"""The load path's reader, as small stages: read-ahead → verify → split → buffer order (see reader.py)."""
from corgi_io.reading.piece_reader import PieceReader

__all__ = ["PieceReader"]
