"""parasim: see how parallel strategies train large models.

The curated public API. app/ and lessons/ import only from here.
"""
