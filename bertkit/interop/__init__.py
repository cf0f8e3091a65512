"""Interoperability with the Hugging Face ecosystem."""
