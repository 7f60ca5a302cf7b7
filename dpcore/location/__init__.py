"""Location release: planar Laplace (geo-indistinguishability), PriLocation, private density grids, Blowfish.

Everything works in great-circle metres (``geometry``); see MECHANISMS.md s.4.
"""
