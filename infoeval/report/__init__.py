"""`infoeval report` and `--html`: one self-contained HTML page per run (or several runs), showing the scored
text coloured by how much each token's distribution changed, with each position's values and both models'
most likely tokens on hover. runs (reading a run folder) → data (the page's numbers) → page (the HTML)."""
