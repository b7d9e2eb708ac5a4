"""GPT-SoVITS's text front end (upstream's GPT_SoVITS/text/): text -> phones (+ word2ph for Chinese), natively.
Each language lives in its own module; the data tables upstream ships sit in ../assets/ (see its README.md)."""
