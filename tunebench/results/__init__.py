"""From rows to answers: per-experiment rows, the CSVs, regression comparison, the HTML report and charts."""
