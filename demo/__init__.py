"""The embedded demo corpus: a synthetic German-English corpus in the IWSLT 2016 file
layout (corpus.py), generated from the word tables of lexicon/. Only prepro.py (and
bench/prepro_speed.py) use it; the model and training never import it."""
