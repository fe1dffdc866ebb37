"""The login-side stage: every result.json of a tree read into rows, repeats aggregated, compared, plotted, reported."""
