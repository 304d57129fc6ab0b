"""Loyalty point-of-sale integration service."""

__version__ = "0.1.0"
