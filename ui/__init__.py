"""The Streamlit app (installed as `erroranalysis_ui`); start it with `erroranalysis ui`."""
