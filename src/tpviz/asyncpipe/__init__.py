"""Chapter 8 (placeholder while building)."""
