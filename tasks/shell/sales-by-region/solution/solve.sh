#!/bin/bash
awk -F, 'NR > 1 { total[$2] += $3 } END { for (r in total) print r "," total[r] }' sales.csv \
    | sort >totals.csv
