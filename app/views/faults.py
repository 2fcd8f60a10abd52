"""Fault tolerance: what a failed device costs, and how checkpoints bring training back."""

import importlib.util

import streamlit as st
from ui import coming_soon, intro

intro("Fault tolerance",
      "Devices fail. A run that checkpoints every k steps loses at most k steps of work plus the restart; "
      "checkpointing too often costs time on every step. This page injects faults into a real run.")

if importlib.util.find_spec("simulator.faults") is None:
    coming_soon("Inject a device failure into a training run, restore from a checkpoint (also onto a different "
                "device count) and compare the lost work with the checkpoint cost.", "simulator.faults")
else:
    st.info("`simulator.faults` has landed; this page is being wired to it.")
