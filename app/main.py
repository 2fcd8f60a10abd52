"""parasim web app: the entry file only routes to the pages."""

import streamlit as st

st.set_page_config(page_title="parasim", page_icon="🧮", layout="wide")
st.title("parasim")
st.write("See how data, pipeline, tensor and hybrid parallelism train large models.")
