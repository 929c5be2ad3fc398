"""Mobility for hosts that move like vehicles (issue 16): SUMO floating-car data, read and written.

``fcd`` reads a SUMO FCD file into per-vehicle points (standard library only); ``sumo`` runs the
``eclipse-sumo`` wheel's ``sumo`` headless to write one. Mapping vehicles to hosts and its errors belong
to ``spec.positions`` (``[mobility] fcd``, ``[[host]] vehicle``).
"""
