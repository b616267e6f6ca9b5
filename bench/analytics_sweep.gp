# Bytes read / bytes needed against the number of data-dependent columns k
# (Q0..Q5), from `build/table sweep FILE OUT.tsv` at its default bounds
# (trip_distance >= 20: 0.47 % of the rows; >= 30: 0.03 %). make analytics-sweep.
#   gnuplot -e "in='bench/results/analytics-vm.tsv'; out='bench/results/analytics-vm.png'" bench/analytics_sweep.gp
set terminal pngcairo size 1100,460 font 'sans,10'
set output out
set datafile separator '\t'
set multiplot layout 1,2 title "gpumem table: the dissertation's taxi queries Q0..Q5 (make analytics-sweep)" font 'sans,12'
set xlabel 'k: columns read for the rows that pass (Qk)'
set xrange [-0.2:5.2]
set grid
set logscale y
set key top left
set title 'I/O amplification (bytes read / bytes needed)'
set ylabel 'read / needed'
pick(m, l, col) = ($1 == m && $3 == l) ? column(col) : 1/0
plot in using 4:(pick(20, 4096, 6)) with linespoints lw 2 title '(b) tiled row groups (any bound)', \
     in using 4:(pick(20, 4096, 5)) with linespoints title '(a) cache, 4 KiB lines, 0.47 %', \
     in using 4:(pick(30, 4096, 5)) with linespoints title '(a) cache, 4 KiB lines, 0.03 %', \
     in using 4:(pick(20, 512, 5)) with linespoints title '(a) cache, 512 B lines, 0.47 %', \
     in using 4:(pick(30, 512, 5)) with linespoints title '(a) cache, 512 B lines, 0.03 %', \
     1 with lines dashtype 2 lc rgb 'gray' title '(c) pread of exactly the needed values'
set title 'Bytes read: tiled (b) over cache (a)'
set ylabel '(b) / (a)'
plot in using 4:(pick(20, 4096, 8)) with linespoints title '4 KiB lines, 0.47 %', \
     in using 4:(pick(30, 4096, 8)) with linespoints title '4 KiB lines, 0.03 %', \
     in using 4:(pick(20, 512, 8)) with linespoints title '512 B lines, 0.47 %', \
     in using 4:(pick(30, 512, 8)) with linespoints title '512 B lines, 0.03 %', \
     1 with lines dashtype 2 lc rgb 'gray' title 'equal'
unset multiplot
