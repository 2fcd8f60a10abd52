"""The parasim web app (Streamlit): `parasim app` runs main.py from here."""
